//! Multi-locks: all or nothing over the plain locks of `/locks`, checked
//! from outside (an atomic Redis-side observer, per-name exclusivity and
//! fencing tokens) under concurrent overlapping sets and single locks on
//! two instances; `blocked_by`, `not_held`, waking, and the limits.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use reqwest::{Response, StatusCode};
use serde_json::{Value, json};

use crate::helpers::*;

async fn multi(app: &TestApp, op: &str, body: Value) -> Response {
    app.post(&format!("/multilocks/{op}"), body).await
}

async fn granted(response: Response) -> Value {
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json().await.expect("grant is JSON")
}

#[tokio::test]
async fn a_set_is_taken_renewed_and_released_as_one() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let response = multi(
        &app,
        "acquire",
        json!({"names": ["a", "b", "c"], "holder": "m"}),
    )
    .await;
    assert!(
        response.headers().get("location").is_none(),
        "a set has no single URL"
    );
    let grant = granted(response).await;
    assert_eq!(grant["holder"], "m");
    assert_eq!(
        grant["locks"],
        json!([
            {"name": "a", "fencing_token": 1, "hold_count": 1},
            {"name": "b", "fencing_token": 1, "hold_count": 1},
            {"name": "c", "fencing_token": 1, "hold_count": 1}
        ])
    );
    assert_eq!(
        (
            &grant["lease_ms"],
            &grant["expires_in_ms"],
            &grant["heartbeat_interval_ms"]
        ),
        (&json!(30000), &json!(30000), &json!(10000))
    );
    // They are the locks of /locks: held, and by m (who may re-enter one).
    for name in ["a", "b", "c"] {
        assert_eq!(app.state(name).await["locked"], true);
    }
    assert_problem(
        app.acquire("b", json!({"holder": "x"})).await,
        409,
        "lock-held",
    )
    .await;
    let again = app.must_acquire("b", json!({"holder": "m"})).await;
    assert_eq!(again["hold_count"], 2);

    let renewed = multi(
        &app,
        "heartbeat",
        json!({"names": ["a", "b", "c"], "holder": "m", "lease_ms": 9000}),
    )
    .await;
    assert_eq!(renewed.status(), StatusCode::OK);
    let renewed: Value = renewed.json().await.unwrap();
    assert_eq!(renewed["lease_ms"], 9000);
    assert_eq!(renewed["locks"][1]["hold_count"], 2);
    let ttl = app.state("c").await["ttl_ms"].as_u64().unwrap();
    assert!(ttl > 8000 && ttl <= 9000, "{ttl}");

    // Not every lock held: 404 naming the ones that are not, nothing renewed.
    let problem = assert_problem(
        multi(
            &app,
            "heartbeat",
            json!({"names": ["a", "z"], "holder": "m", "lease_ms": 60000}),
        )
        .await,
        404,
        "not-held",
    )
    .await;
    assert_eq!(problem["not_held"], json!(["z"]));
    assert!(
        app.state("a").await["ttl_ms"].as_u64().unwrap() <= 9000,
        "a was not renewed"
    );
    let problem = assert_problem(
        multi(&app, "release", json!({"names": ["a", "z"], "holder": "m"})).await,
        404,
        "not-held",
    )
    .await;
    assert_eq!(problem["not_held"], json!(["z"]));
    assert_eq!(app.state("a").await["locked"], true, "nothing was released");

    // Release: one hold each; `released` names the locks that became free.
    let released = multi(
        &app,
        "release",
        json!({"names": ["a", "b", "c"], "holder": "m"}),
    )
    .await;
    assert_eq!(released.status(), StatusCode::OK);
    assert_eq!(
        released.json::<Value>().await.unwrap(),
        json!({"released": ["a", "c"]})
    );
    assert_eq!(
        app.state("b").await["hold_count"],
        1,
        "m's own /locks hold stays"
    );
    let next =
        granted(multi(&app, "acquire", json!({"names": ["a", "c"], "holder": "n"})).await).await;
    assert_eq!(
        next["locks"][0]["fencing_token"], 2,
        "tokens go on per name"
    );
}

#[tokio::test]
async fn a_blocked_set_takes_nothing_and_names_what_blocks_it() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("b", json!({"holder": "x", "lease_ms": 5000}))
        .await;
    app.must_acquire("d", json!({"holder": "y", "lease_ms": 20000}))
        .await;
    let response = multi(
        &app,
        "acquire",
        json!({"names": ["a", "b", "c", "d"], "holder": "m"}),
    )
    .await;
    assert_eq!(response.headers()["retry-after"], "20");
    let problem = assert_problem(response, 409, "lock-held").await;
    assert_eq!(problem["blocked_by"], json!(["b", "d"]));
    let hint = problem["retry_after_ms"].as_u64().unwrap();
    assert!(
        hint > 19000 && hint <= 20000,
        "the longest blocking lease: {hint}"
    );
    for name in ["a", "c"] {
        let state = app.state(name).await;
        assert_eq!(state["locked"], false, "{name}: nothing taken");
        assert_eq!(state["fencing_token"], 0, "{name}: not even for a moment");
    }
}

/// A waiter on a set is woken by the release of the one lock that blocked
/// it, from another instance; and a single lock's waiter is woken by the
/// release of a set.
#[tokio::test]
async fn set_and_single_waiters_are_woken_across_instances() {
    let redis = redis();
    let one = spawn_app(test_config(&redis)).await;
    let two = spawn_app(test_config(&redis)).await;
    one.must_acquire("c", json!({"holder": "x"})).await;
    let waiter = two.spawn_post(
        "/multilocks/acquire",
        json!({"names": ["a", "b", "c"], "holder": "m", "wait_ms": 10000}),
    );
    two.wait_for_waiters("c", 1).await;
    assert_eq!(
        two.state("a").await["waiters"],
        1,
        "one waiter, counted on each name"
    );
    let released = Instant::now();
    assert_eq!(one.release("c", "x").await.status(), 200);
    granted(waiter.await.unwrap()).await;
    assert!(
        released.elapsed() < Duration::from_secs(1),
        "{:?}",
        released.elapsed()
    );
    two.wait_for_waiters("c", 0).await;

    let single = one.spawn_post("/locks/b/acquire", json!({"holder": "s", "wait_ms": 10000}));
    one.wait_for_waiters("b", 1).await;
    let released = Instant::now();
    let response = multi(
        &two,
        "release",
        json!({"names": ["a", "b", "c"], "holder": "m"}),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(single.await.unwrap().status(), 201);
    assert!(released.elapsed() < Duration::from_secs(1));
}

/// Overlapping sets and single locks from 16 workers on two instances:
/// everyone finishes (no deadlock), each name has at most one holder at a
/// time, tokens per name are never reused, and an atomic observer inside
/// Redis never sees a part of a set held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlapping_sets_and_single_locks_never_deadlock_or_show_a_part() {
    let redis = redis();
    let one = Arc::new(spawn_app(test_config(&redis)).await);
    let two = Arc::new(spawn_app(test_config(&redis)).await);
    let names = ["n0", "n1", "n2", "n3", "n4"];
    let inside: Arc<HashMap<&str, AtomicI64>> =
        Arc::new(names.iter().map(|n| (*n, AtomicI64::new(0))).collect());
    let worst = Arc::new(AtomicI64::new(0));
    let stop = Arc::new(AtomicBool::new(false));

    // The observer: one Lua call reads every name's holder atomically; a
    // set holder ('set-…') must hold its whole set.
    let mut conn = redis_conn(&redis).await;
    let observe = redis::Script::new(
        "local h = {} for i, k in ipairs(KEYS) do h[i] = redis.call('HGET', k, 'holder') or '' end return h",
    );
    let keys: Vec<String> = names
        .iter()
        .map(|n| format!("latchkey:{{{n}}}:lock"))
        .collect();
    let sets: Vec<Vec<usize>> = vec![vec![0, 1, 2], vec![2, 3, 4], vec![4, 0], vec![1, 3]];
    let observer = {
        let (stop, sets) = (stop.clone(), sets.clone());
        tokio::spawn(async move {
            let mut looks = 0;
            while !stop.load(Ordering::Relaxed) {
                let mut call = observe.prepare_invoke();
                for k in &keys {
                    call.key(k);
                }
                let holders: Vec<String> = call.invoke_async(&mut conn).await.unwrap();
                for (i, h) in holders.iter().enumerate() {
                    if let Some(set) = h.strip_prefix("set-").and_then(|s| s.split('-').next()) {
                        let set: usize = set.parse().unwrap();
                        for &j in &sets[set] {
                            assert_eq!(
                                &holders[j], h,
                                "{h} holds {} but not {}",
                                names[i], names[j]
                            );
                        }
                    }
                }
                looks += 1;
            }
            looks
        })
    };

    let mut workers = Vec::new();
    for w in 0..16usize {
        let app = if w % 2 == 0 { one.clone() } else { two.clone() };
        let (inside, worst, sets) = (inside.clone(), worst.clone(), sets.clone());
        workers.push(tokio::spawn(async move {
            let mut tokens: Vec<(String, u64)> = Vec::new();
            for round in 0..8 {
                let (held, holder): (Vec<&str>, String) = if w % 4 == 3 {
                    (
                        vec![names[(w + round) % names.len()]],
                        format!("one-{w}-{round}"),
                    )
                } else {
                    let set = (w + round) % sets.len();
                    (
                        sets[set].iter().map(|&i| names[i]).collect(),
                        format!("set-{set}-{w}-{round}"),
                    )
                };
                let response = if held.len() == 1 {
                    app.acquire(held[0], json!({"holder": holder, "wait_ms": 20000}))
                        .await
                } else {
                    multi(
                        &app,
                        "acquire",
                        json!({"names": held, "holder": holder, "wait_ms": 20000}),
                    )
                    .await
                };
                let grant = granted(response).await;
                for name in &held {
                    let now = inside[name].fetch_add(1, Ordering::SeqCst) + 1;
                    worst.fetch_max(now, Ordering::SeqCst);
                }
                if held.len() == 1 {
                    tokens.push((
                        held[0].to_string(),
                        grant["fencing_token"].as_u64().unwrap(),
                    ));
                } else {
                    for lock in grant["locks"].as_array().unwrap() {
                        tokens.push((
                            lock["name"].as_str().unwrap().to_string(),
                            lock["fencing_token"].as_u64().unwrap(),
                        ));
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                for name in &held {
                    inside[name].fetch_sub(1, Ordering::SeqCst);
                }
                let released = if held.len() == 1 {
                    app.release(held[0], &holder).await
                } else {
                    multi(&app, "release", json!({"names": held, "holder": holder})).await
                };
                assert_eq!(released.status(), StatusCode::OK);
            }
            tokens
        }));
    }
    let finished = tokio::time::timeout(Duration::from_secs(60), async {
        let mut all = Vec::new();
        for worker in workers {
            all.extend(worker.await.expect("worker finished"));
        }
        all
    })
    .await
    .expect("no deadlock: every worker finished");
    stop.store(true, Ordering::Relaxed);
    let looks = observer
        .await
        .expect("the observer never saw a part of a set");
    assert!(looks > 10, "the observer looked ({looks} times)");
    assert_eq!(
        worst.load(Ordering::SeqCst),
        1,
        "each lock had one holder at a time"
    );
    let mut tokens = finished;
    let count = tokens.len();
    tokens.sort();
    tokens.dedup();
    assert_eq!(
        tokens.len(),
        count,
        "no token was issued twice for one name"
    );
    for name in names {
        assert_eq!(
            one.state(name).await["locked"],
            false,
            "{name} free at the end"
        );
    }
}

#[tokio::test]
async fn sixty_four_names_are_one_set_and_bad_sets_get_problems() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let names: Vec<String> = (0..64).map(|i| format!("many-{i}")).collect();
    let grant = granted(multi(&app, "acquire", json!({"names": names, "holder": "m"})).await).await;
    assert_eq!(grant["locks"].as_array().unwrap().len(), 64);
    assert_eq!(app.state("many-63").await["locked"], true);
    let released: Value = multi(&app, "release", json!({"names": names, "holder": "m"}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(released["released"].as_array().unwrap().len(), 64);

    let too_many: Vec<String> = (0..65).map(|i| format!("many-{i}")).collect();
    let problem = assert_problem(
        multi(&app, "acquire", json!({"names": too_many})).await,
        400,
        "out-of-range",
    )
    .await;
    assert_eq!(problem["field"], "names");
    for (body, slug) in [
        (json!({"names": []}), "invalid-body"),
        (json!({}), "invalid-body"),
        (json!({"names": ["a", "a"]}), "invalid-body"),
        (json!({"names": ["a", "{b}"]}), "invalid-name"),
        (json!({"names": ["a"], "lease_ms": 1}), "out-of-range"),
        (json!({"names": ["a"], "holder": ""}), "invalid-body"),
        (json!({"names": ["a"], "extra": 1}), "invalid-body"),
    ] {
        assert_problem(multi(&app, "acquire", body).await, 400, slug).await;
    }
    assert_problem(
        multi(&app, "heartbeat", json!({"names": ["a"]})).await,
        400,
        "invalid-body",
    )
    .await;
    assert_problem(
        multi(&app, "release", json!({"names": ["a"], "holder": "a b"})).await,
        400,
        "invalid-body",
    )
    .await;
    assert_problem(
        app.client
            .post(app.url("/multilocks/acquire"))
            .body(r#"{"names":["a"]}"#)
            .send()
            .await
            .unwrap(),
        415,
        "unsupported-media-type",
    )
    .await;
    assert_eq!(
        app.state("a").await["locked"],
        false,
        "no bad request took anything"
    );
}

/// A set's waiter that goes away takes nothing; one that times out gets
/// the 409 with what still blocks it.
#[tokio::test]
async fn a_set_waiter_that_leaves_or_times_out_takes_nothing() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("b", json!({"holder": "x"})).await;
    let gone = app
        .client
        .post(app.url("/multilocks/acquire"))
        .json(&json!({"names": ["a", "b"], "holder": "m", "wait_ms": 10000}))
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(gone.is_err(), "the client gave up");
    app.wait_for_waiters("b", 0).await;
    assert_eq!(app.release("b", "x").await.status(), 200);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(app.state("a").await["locked"], false);
    assert_eq!(app.state("b").await["locked"], false);

    app.must_acquire("b", json!({"holder": "x", "lease_ms": 30000}))
        .await;
    let started = Instant::now();
    let response = multi(
        &app,
        "acquire",
        json!({"names": ["a", "b"], "holder": "m", "wait_ms": 400}),
    )
    .await;
    let problem = assert_problem(response, 409, "lock-held").await;
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert_eq!(problem["blocked_by"], json!(["b"]));
    assert_eq!(app.state("a").await["locked"], false);
}
