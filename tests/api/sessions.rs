//! Sessions (`/sessions`): holds of every primitive attached to one TTL,
//! renewed by the session's heartbeat only, released all at once when it
//! ends (deleted, or expired), with their waiters woken on every instance.

use std::time::{Duration, Instant};

use latchkey::config::RedisMode;
use latchkey::devredis::{RedisCluster, RedisServer};
use reqwest::{Method, Response};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::task::JoinHandle;

use crate::helpers::*;

/// Creates a session with this TTL on `app`; returns its id.
async fn session(app: &TestApp, ttl_ms: u64) -> String {
    let created = app.post("/sessions", json!({"ttl_ms": ttl_ms})).await;
    assert_eq!(created.status(), 201);
    let location = created.headers()["location"].to_str().unwrap().to_string();
    let body: Value = created.json().await.unwrap();
    assert_eq!(body["ttl_ms"], ttl_ms);
    assert_eq!(body["heartbeat_interval_ms"], ttl_ms / 3);
    let id = body["session"].as_str().expect("an id").to_string();
    assert_eq!(id.len(), 32, "128 random bits as hex: {id}");
    assert_eq!(location, format!("/sessions/{id}"));
    id
}

/// POSTs `body` to `path` and asserts 201; returns the grant.
async fn granted(app: &TestApp, path: &str, body: Value) -> Value {
    let response = app.post(path, body).await;
    let status = response.status();
    let grant: Value = response.json().await.unwrap();
    assert_eq!(status, 201, "{path}: {grant}");
    grant
}

async fn get(app: &TestApp, path: &str) -> (u16, Value) {
    let response = app.client.get(app.url(path)).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

async fn delete(app: &TestApp, path: &str) -> Response {
    app.client.delete(app.url(path)).send().await.unwrap()
}

async fn configure_semaphore(app: &TestApp, name: &str, permits: u64) {
    let response = app
        .client
        .put(app.url(&format!("/semaphores/{name}")))
        .json(&json!({"permits": permits}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

/// Whether each of the session's objects is held (by anyone).
async fn held(app: &TestApp) -> [bool; 5] {
    let lock = get(app, "/locks/s-lock").await.1;
    let rw = get(app, "/rwlocks/s-rw").await.1;
    let sem = get(app, "/semaphores/s-sem").await.1;
    let m1 = get(app, "/locks/s-m1").await.1;
    let m2 = get(app, "/locks/s-m2").await.1;
    [
        lock["locked"] == true,
        rw["mode"] == "read",
        sem["available"] == 0,
        m1["locked"] == true,
        m2["locked"] == true,
    ]
}

/// Takes a lock, a read lock, two semaphore permits and a multi-lock of
/// two locks in `id`; returns the grants.
async fn hold_everything(app: &TestApp, id: &str) -> Vec<Value> {
    configure_semaphore(app, "s-sem", 2).await;
    vec![
        granted(
            app,
            "/locks/s-lock/acquire",
            json!({"holder": "w", "session": id}),
        )
        .await,
        granted(
            app,
            "/rwlocks/s-rw/read/acquire",
            json!({"holder": "w", "session": id}),
        )
        .await,
        granted(
            app,
            "/semaphores/s-sem/acquire",
            json!({"holder": "w", "permits": 2, "session": id}),
        )
        .await,
        granted(
            app,
            "/multilocks/acquire",
            json!({"names": ["s-m1", "s-m2"], "holder": "w", "session": id}),
        )
        .await,
    ]
}

/// One waiter on each of the session's objects, half on each instance;
/// returns once every one of them waits.
async fn waiters(a: &TestApp, b: &TestApp, wait_ms: u64) -> Vec<JoinHandle<Response>> {
    let waiting = vec![
        a.spawn_post(
            "/locks/s-lock/acquire",
            json!({"holder": "x", "wait_ms": wait_ms}),
        ),
        b.spawn_post(
            "/rwlocks/s-rw/write/acquire",
            json!({"holder": "x", "wait_ms": wait_ms}),
        ),
        a.spawn_post(
            "/semaphores/s-sem/acquire",
            json!({"holder": "x", "wait_ms": wait_ms}),
        ),
        b.spawn_post(
            "/multilocks/acquire",
            json!({"names": ["s-m1", "s-m2"], "holder": "x", "wait_ms": wait_ms}),
        ),
    ];
    a.wait_for_waiters("s-lock", 1).await;
    for (app, path) in [(b, "/rwlocks/s-rw"), (a, "/semaphores/s-sem")] {
        let reached = eventually(Duration::from_secs(3), || async {
            get(app, path).await.1["waiters"] == 1
        })
        .await;
        assert!(reached, "a waiter on {path}");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(waiting.iter().all(|w| !w.is_finished()), "everyone waits");
    waiting
}

/// The issue's test: one session holds a lock, a read lock, two semaphore
/// permits and a multi-lock; heartbeats of the session alone keep them all
/// well past its TTL; when they stop, everything is free within the TTL
/// plus the re-check bound, and waiters parked on two instances get it.
#[tokio::test]
async fn one_session_heartbeat_renews_every_hold_and_its_expiry_frees_them_all() {
    let redis = redis();
    let a = spawn_app(test_config(&redis)).await;
    let b = spawn_app(test_config(&redis)).await;
    let ttl_ms = 1500;
    let id = session(&a, ttl_ms).await;
    let grants = hold_everything(&a, &id).await;
    for grant in &grants {
        // What the hold has left of the session's TTL.
        assert!(grant["lease_ms"].as_u64().unwrap() <= ttl_ms, "{grant}");
        assert_eq!(grant["expires_in_ms"], grant["lease_ms"], "{grant}");
    }
    let (status, state) = get(&b, &format!("/sessions/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(state["holds"], 5, "{state}");
    assert_eq!(state["ttl_ms"], ttl_ms);

    // Three TTLs of session heartbeats, through either instance: no hold
    // is renewed by itself, and every one is kept.
    let started = Instant::now();
    let mut last_beat = Instant::now();
    let mut turn = 0;
    while started.elapsed() < Duration::from_millis(3 * ttl_ms) {
        tokio::time::sleep(Duration::from_millis(ttl_ms / 3)).await;
        let app = if turn % 2 == 0 { &a } else { &b };
        turn += 1;
        last_beat = Instant::now();
        let beat = app
            .post(&format!("/sessions/{id}/heartbeat"), json!({}))
            .await;
        assert_eq!(beat.status(), 200);
        let beat: Value = beat.json().await.unwrap();
        assert_eq!(beat["session"], id.as_str());
        assert_eq!(beat["ttl_ms"], ttl_ms);
        assert_eq!(beat["holds"], 5, "every hold renewed: {beat}");
    }
    assert_eq!(
        held(&b).await,
        [true; 5],
        "every hold outlived its own lease"
    );
    let lock = get(&a, "/locks/s-lock").await.1;
    assert!(lock["ttl_ms"].as_u64().unwrap() > 0, "{lock}");

    // Heartbeats stop; waiters park on both instances.
    let waiting = waiters(&a, &b, 10_000).await;
    for waiter in waiting {
        let response = waiter.await.unwrap();
        assert_eq!(response.status(), 201, "a waiter got its hold");
    }
    let freed = last_beat.elapsed();
    // The TTL from the last heartbeat, the re-check bound (waiters look
    // again when what blocks them ends) and slack for a busy machine.
    assert!(
        freed < Duration::from_millis(ttl_ms + 1000),
        "freed {freed:?} after the last heartbeat (TTL {ttl_ms} ms)"
    );
    let (status, gone) = get(&a, &format!("/sessions/{id}")).await;
    assert_eq!(status, 404, "{gone}");
}

/// DELETE of a session releases every hold at once (each with all its
/// reentrant holds) and wakes the waiters on both instances.
#[tokio::test]
async fn deleting_a_session_releases_everything_at_once_and_wakes_waiters() {
    let redis = redis();
    let a = spawn_app(test_config(&redis)).await;
    let b = spawn_app(test_config(&redis)).await;
    let id = session(&a, 30_000).await;
    hold_everything(&a, &id).await;
    // Re-entered in the session: still one hold, released whole.
    let again = granted(
        &b,
        "/locks/s-lock/acquire",
        json!({"holder": "w", "session": id}),
    )
    .await;
    assert_eq!(again["hold_count"], 2);
    let waiting = waiters(&a, &b, 20_000).await;
    let deleting = Instant::now();
    let deleted = delete(&b, &format!("/sessions/{id}")).await;
    assert_eq!(deleted.status(), 200);
    let deleted: Value = deleted.json().await.unwrap();
    assert_eq!(deleted, json!({"released": 5}));
    for waiter in waiting {
        assert_eq!(waiter.await.unwrap().status(), 201);
    }
    assert!(
        deleting.elapsed() < Duration::from_secs(2),
        "woken {:?} after the DELETE (the holds' leases were 30 s)",
        deleting.elapsed()
    );
    assert_problem(
        delete(&a, &format!("/sessions/{id}")).await,
        404,
        "not-found",
    )
    .await;
}

/// A session hold keeps its holder id and fencing token: its holder can
/// renew and release it directly, and the session forgets a hold released
/// that way at its next heartbeat.
#[tokio::test]
async fn a_session_hold_is_still_its_holders_and_released_holds_are_forgotten() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let before = app.must_acquire("h-lock", json!({"holder": "o"})).await;
    app.release("h-lock", "o").await;
    let id = session(&app, 30_000).await;
    let grant = granted(
        &app,
        "/locks/h-lock/acquire",
        json!({"holder": "w", "session": id}),
    )
    .await;
    assert_eq!(grant["holder"], "w");
    assert_eq!(
        grant["fencing_token"].as_u64().unwrap(),
        before["fencing_token"].as_u64().unwrap() + 1
    );
    granted(
        &app,
        "/fair-locks/h-fair/acquire",
        json!({"holder": "w", "session": id}),
    )
    .await;
    let beat = app.heartbeat("h-lock", "w", json!({})).await;
    assert_eq!(beat.status(), 200, "the holder renews it itself too");
    assert_eq!(app.release("h-lock", "w").await.status(), 200);
    let path = format!("/sessions/{id}");
    assert_eq!(
        get(&app, &path).await.1["holds"],
        2,
        "counted until a heartbeat"
    );
    let beat = app.post(&format!("{path}/heartbeat"), json!({})).await;
    assert_eq!(beat.json::<Value>().await.unwrap()["holds"], 1);
    assert_eq!(get(&app, &path).await.1["holds"], 1);
    let deleted: Value = delete(&app, &path).await.json().await.unwrap();
    assert_eq!(deleted, json!({"released": 1}));
    assert_eq!(get(&app, "/fair-locks/h-fair").await.1["locked"], false);
}

/// A session that does not exist (never created, deleted, or expired) is
/// 404 everywhere: on an acquire of every kind (nothing acquired), a
/// heartbeat (`not-held`), a read and a DELETE.
#[tokio::test]
async fn an_unknown_or_expired_session_is_404_everywhere() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    configure_semaphore(&app, "u-sem", 1).await;
    let expired = session(&app, 500).await;
    // A hold in the short session, renewed by nothing.
    granted(
        &app,
        "/locks/u-held/acquire",
        json!({"holder": "w", "session": expired}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(app.state("u-held").await["locked"], false, "ended with it");
    for id in ["0123456789abcdef0123456789abcdef", expired.as_str()] {
        for (path, body) in [
            ("/locks/u-lock/acquire", json!({"session": id})),
            ("/fair-locks/u-lock/acquire", json!({"session": id})),
            ("/rwlocks/u-rw/read/acquire", json!({"session": id})),
            ("/rwlocks/u-rw/write/acquire", json!({"session": id})),
            ("/semaphores/u-sem/acquire", json!({"session": id})),
            (
                "/multilocks/acquire",
                json!({"names": ["u-m1"], "session": id}),
            ),
        ] {
            let problem = assert_problem(app.post(path, body).await, 404, "not-found").await;
            assert!(
                problem["detail"]
                    .as_str()
                    .unwrap()
                    .contains("no such session"),
                "{path}: {problem}"
            );
            assert!(!problem.to_string().contains(id), "{problem}");
        }
        let path = format!("/sessions/{id}");
        let beat = app.post(&format!("{path}/heartbeat"), json!({})).await;
        assert_problem(beat, 404, "not-held").await;
        assert_problem(
            app.client.get(app.url(&path)).send().await.unwrap(),
            404,
            "not-found",
        )
        .await;
        assert_problem(delete(&app, &path).await, 404, "not-found").await;
    }
    assert_eq!(app.state("u-lock").await["locked"], false);
    assert_eq!(get(&app, "/semaphores/u-sem").await.1["available"], 1);
}

/// Bad input is 400 with a clear problem: a lease and a session together,
/// a malformed session id, a TTL out of range.
#[tokio::test]
async fn bad_session_input_is_refused_with_400() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let id = session(&app, 30_000).await;
    let both = app
        .acquire("b-lock", json!({"session": id, "lease_ms": 5000}))
        .await;
    let problem = assert_problem(both, 400, "invalid-body").await;
    assert!(problem["detail"].as_str().unwrap().contains("not both"));
    let both = app
        .post(
            "/semaphores/b-sem/acquire",
            json!({"session": id, "lease_ms": 5000}),
        )
        .await;
    assert_problem(both, 400, "invalid-body").await;
    let malformed = app.acquire("b-lock", json!({"session": "a/b"})).await;
    assert_problem(malformed, 400, "invalid-body").await;
    let path = app.post("/sessions/a%20b/heartbeat", json!({})).await;
    assert_problem(path, 400, "invalid-name").await;
    for ttl in [json!(10), json!(86_400_001)] {
        let problem = assert_problem(
            app.post("/sessions", json!({"ttl_ms": ttl})).await,
            400,
            "out-of-range",
        )
        .await;
        assert_eq!(problem["field"], "ttl_ms");
        assert_eq!(
            (problem["minimum"].clone(), problem["maximum"].clone()),
            (json!(500), json!(86_400_000))
        );
    }
    let beat = app
        .post(&format!("/sessions/{id}/heartbeat"), json!({"ttl_ms": 1}))
        .await;
    assert_problem(beat, 400, "out-of-range").await;
    let unknown = app.post("/sessions", json!({"ttl": 1000})).await;
    assert_problem(unknown, 400, "invalid-body").await;
    // Nothing was taken by the refused requests.
    assert_eq!(app.state("b-lock").await["locked"], false);
    assert_eq!(get(&app, &format!("/sessions/{id}")).await.1["holds"], 0);
    // A heartbeat with a new TTL makes it the session's.
    let beat = app
        .post(
            &format!("/sessions/{id}/heartbeat"),
            json!({"ttl_ms": 9000}),
        )
        .await;
    let beat: Value = beat.json().await.unwrap();
    assert_eq!(
        (
            beat["ttl_ms"].clone(),
            beat["heartbeat_interval_ms"].clone()
        ),
        (json!(9000), json!(3000))
    );
}

fn entry(namespace: &str, key: &str) -> String {
    let hash: String = Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{namespace}:client:{hash}")
}

async fn keyed(app: &TestApp, key: &str, method: Method, path: &str, body: Value) -> Response {
    app.client
        .request(method, app.url(path))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// A session lives in its key's namespace: another namespace can neither
/// acquire in it, renew, read nor end it (404, as for no session at all).
#[tokio::test]
async fn a_session_of_one_namespace_is_unknown_in_another() {
    let redis = redis();
    let (team_a, team_b) = ("session-key-of-team-a-0123", "session-key-of-team-b-0123");
    let app = spawn_app(Config {
        api_keys: vec![entry("team-a", team_a), entry("team-b", team_b)],
        ..test_config(&redis)
    })
    .await;
    let created = keyed(&app, team_a, Method::POST, "/sessions", json!({})).await;
    assert_eq!(created.status(), 201, "a client key creates sessions");
    let id = created.json::<Value>().await.unwrap()["session"]
        .as_str()
        .unwrap()
        .to_string();
    let acquire = json!({"holder": "w", "session": id});
    let path = format!("/sessions/{id}");
    let theirs = keyed(
        &app,
        team_b,
        Method::POST,
        "/locks/n/acquire",
        acquire.clone(),
    )
    .await;
    assert_problem(theirs, 404, "not-found").await;
    let beat = format!("{path}/heartbeat");
    let theirs = keyed(&app, team_b, Method::POST, &beat, json!({})).await;
    assert_problem(theirs, 404, "not-held").await;
    for method in [Method::GET, Method::DELETE] {
        let theirs = keyed(&app, team_b, method, &path, json!({})).await;
        assert_problem(theirs, 404, "not-found").await;
    }
    let ours = keyed(&app, team_a, Method::POST, "/locks/n/acquire", acquire).await;
    assert_eq!(ours.status(), 201);
    // Team B's lock of the same name is another object, free.
    let theirs = keyed(&app, team_b, Method::GET, "/locks/n", json!({})).await;
    assert_eq!(theirs.json::<Value>().await.unwrap()["locked"], false);
    let ended = keyed(&app, team_a, Method::DELETE, &path, json!({})).await;
    assert_eq!(ended.json::<Value>().await.unwrap(), json!({"released": 1}));
}

/// A RedLock and a fair lock in a session: renewed by its heartbeats
/// (on every RedLock node), released by its DELETE.
#[tokio::test]
async fn redlocks_and_fair_locks_live_as_long_as_their_session() {
    let main = redis();
    let nodes: Vec<RedisServer> = (0..3).map(|_| redis()).collect();
    let app = spawn_app(Config {
        redlock_nodes: nodes.iter().map(RedisServer::url).collect(),
        ..test_config(&main)
    })
    .await;
    let ttl_ms = 1200;
    let id = session(&app, ttl_ms).await;
    let red = granted(
        &app,
        "/redlocks/r-red/acquire",
        json!({"holder": "w", "session": id}),
    )
    .await;
    assert_eq!(red["nodes"]["acquired"], 3, "{red}");
    assert!(red["expires_in_ms"].as_u64().unwrap() <= ttl_ms, "{red}");
    granted(
        &app,
        "/fair-locks/r-fair/acquire",
        json!({"holder": "w", "session": id}),
    )
    .await;
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(ttl_ms / 3)).await;
        let beat = app
            .post(&format!("/sessions/{id}/heartbeat"), json!({}))
            .await;
        assert_eq!(beat.status(), 200);
    }
    let red = get(&app, "/redlocks/r-red").await.1;
    assert_eq!(red["locked_on"], 3, "renewed on every node: {red}");
    assert_eq!(get(&app, "/fair-locks/r-fair").await.1["locked"], true);
    let waiter = app.spawn_post(
        "/redlocks/r-red/acquire",
        json!({"holder": "x", "wait_ms": 10_000}),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let deleted: Value = delete(&app, &format!("/sessions/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(deleted, json!({"released": 2}));
    assert_eq!(waiter.await.unwrap().status(), 201);
    assert_eq!(get(&app, "/fair-locks/r-fair").await.1["locked"], false);
}

/// The session id is a capability: the real binary never logs it at info
/// level, and no state read or metric shows it.
#[tokio::test]
async fn a_session_id_is_never_logged_or_shown_in_state_reads() {
    let redis = redis();
    let (mut child, base, client) = ready_binary(&redis.url(), &[]).await;
    let post = |path: &str, body: Value| client.post(format!("{base}{path}")).json(&body).send();
    let created: Value = post("/sessions", json!({}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["session"].as_str().unwrap().to_string();
    let in_session = json!({"holder": "w", "session": id});
    assert_eq!(
        post("/locks/l-lock/acquire", in_session)
            .await
            .unwrap()
            .status(),
        201
    );
    post(&format!("/sessions/{id}/heartbeat"), json!({}))
        .await
        .unwrap();
    let mut shown = Vec::new();
    for path in ["/locks/l-lock", &format!("/sessions/{id}"), "/metrics"] {
        let text = client.get(format!("{base}{path}")).send().await.unwrap();
        shown.push(text.text().await.unwrap());
    }
    assert!(shown[1].contains(&id), "its creator reads it back");
    for text in [&shown[0], &shown[2]] {
        assert!(!text.contains(&id), "{text}");
    }
    // An acquire with a bogus id, and the DELETE.
    post("/locks/l-other/acquire", json!({"session": "ffff0000"}))
        .await
        .unwrap();
    client
        .delete(format!("{base}/sessions/{id}"))
        .send()
        .await
        .unwrap();
    let log = log_when_killed(&mut child);
    assert!(log.contains("latchkey listening"), "{log}");
    assert!(!log.contains(&id), "the session id in the log:\n{log}");
    assert!(!log.contains("ffff0000"), "{log}");
}

/// On a Redis Cluster a session's holds live in several slots (on
/// different masters); one heartbeat renews them all and DELETE releases
/// them all.
#[tokio::test]
async fn on_a_cluster_a_sessions_holds_on_several_slots_renew_and_release() {
    let cluster = RedisCluster::start(3).expect("cluster starts");
    let app = spawn_app(Config {
        redis_mode: RedisMode::Cluster,
        ..test_config_for(cluster.urls())
    })
    .await;
    let ttl_ms = 1500;
    let id = session(&app, ttl_ms).await;
    let names: Vec<String> = (0..6).map(|i| format!("c-{i}")).collect();
    for name in &names[..4] {
        granted(
            &app,
            &format!("/locks/{name}/acquire"),
            json!({"holder": "w", "session": id}),
        )
        .await;
    }
    granted(
        &app,
        "/multilocks/acquire",
        json!({"names": &names[4..], "holder": "w", "session": id}),
    )
    .await;
    configure_semaphore(&app, "c-sem", 1).await;
    granted(
        &app,
        "/semaphores/c-sem/acquire",
        json!({"holder": "w", "session": id}),
    )
    .await;
    for _ in 0..9 {
        tokio::time::sleep(Duration::from_millis(ttl_ms / 3)).await;
        let beat = app
            .post(&format!("/sessions/{id}/heartbeat"), json!({}))
            .await;
        assert_eq!(beat.status(), 200);
    }
    for name in &names {
        assert_eq!(app.state(name).await["locked"], true, "{name}");
    }
    assert_eq!(get(&app, &format!("/sessions/{id}")).await.1["holds"], 7);
    let deleted: Value = delete(&app, &format!("/sessions/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(deleted, json!({"released": 7}));
    for name in &names {
        assert_eq!(app.state(name).await["locked"], false, "{name}");
    }
    assert_eq!(get(&app, "/semaphores/c-sem").await.1["available"], 1);
}

/// A session that ends while an acquire in it waits: the acquire is
/// answered 404 once it could be granted, and nothing is left held. A
/// stream (SSE) acquire in a live session gets its hold attached.
#[tokio::test]
async fn an_acquire_whose_session_ends_while_it_waits_takes_nothing() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let id = session(&app, 30_000).await;
    let waiter = app
        .held_with_waiter("e-lock", ("other", 30_000), ("w", 10_000))
        .await;
    // The waiter above waits without a session; this one waits in it.
    let in_session = app.spawn_post(
        "/locks/e-lock/acquire",
        json!({"holder": "s", "session": id, "wait_ms": 10_000}),
    );
    app.wait_for_waiters("e-lock", 2).await;
    let deleted: Value = delete(&app, &format!("/sessions/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(deleted, json!({"released": 0}));
    assert_eq!(app.release("e-lock", "other").await.status(), 200);
    // Whichever of the two gets it first: the plain waiter ends with it,
    // the one in the ended session with 404 and nothing held.
    let plain = waiter.await.unwrap();
    assert_eq!(plain.status(), 201);
    assert_eq!(app.release("e-lock", "w").await.status(), 200);
    assert_problem(in_session.await.unwrap(), 404, "not-found").await;
    assert_eq!(app.state("e-lock").await["locked"], false);

    // SSE: the `acquired` event expires with the session.
    let id = session(&app, 30_000).await;
    app.must_acquire("e-lock", json!({"holder": "other", "lease_ms": 1000}))
        .await;
    let stream = app
        .client
        .post(app.url("/locks/e-lock/acquire"))
        .header("accept", "text/event-stream")
        .json(&json!({"holder": "s", "session": id, "wait_ms": 5000}))
        .send()
        .await
        .unwrap();
    let events = read_sse(stream).await;
    let (name, grant) = events.last().unwrap();
    assert_eq!(name, "acquired", "{events:?}");
    assert!(
        grant["expires_in_ms"].as_u64().unwrap() <= 30_000,
        "{grant}"
    );
    assert_eq!(get(&app, &format!("/sessions/{id}")).await.1["holds"], 1);
}

/// The session scripts below HTTP: a session is one hash whose TTL is the
/// session's; a hold taken in it records it and gets the session's
/// remaining TTL as its lease, a heartbeat renews both, a renewal of an
/// older version changes nothing, and a hold gone is forgotten.
#[tokio::test]
async fn the_session_scripts_keep_each_holds_lease_with_the_sessions_ttl() {
    use latchkey::coord::locks::{LockKind, Locks};
    use latchkey::coord::rwlocks::RwLocks;
    use latchkey::coord::semaphores::Semaphores;
    use latchkey::coord::sessions::{Hold, HoldKind, Sessions};
    use latchkey::coord::{AttemptId, SessionTerm, Wait};
    use redis::AsyncCommands;

    let redis = redis();
    let store = test_store(&redis).await;
    let locks = Locks::new(store.clone(), LockKind::Plain);
    let sessions = Sessions::new(
        store.clone(),
        (
            locks.clone(),
            Locks::new(store.clone(), LockKind::Fair { grace_ms: 1000 }),
        ),
        RwLocks::new(store.clone(), 1000),
        Semaphores::new(store.clone(), 1000),
        None,
    );
    let mut conn = redis_conn(&redis).await;
    assert!(sessions.create("s1", 10_000, "").await.unwrap());
    assert!(
        !sessions.create("s1", 10_000, "").await.unwrap(),
        "ids are unique"
    );
    let pttl: i64 = conn.pttl("t:{s1}:session").await.unwrap();
    assert!(pttl > 9_900 && pttl <= 10_000, "{pttl}");

    tokio::time::sleep(Duration::from_millis(300)).await;
    let terms = sessions.terms("s1").await.unwrap().expect("it exists");
    assert!(terms.remaining_ms <= 9_750, "{terms:?}");
    let term = SessionTerm {
        id: "s1",
        version: terms.version,
        end_ms: terms.end_ms,
        owner: None,
    };
    locks
        .try_acquire_in(
            "k",
            "h",
            terms.remaining_ms,
            Wait::default(),
            &AttemptId::new(),
            Some(term),
            "",
        )
        .await
        .unwrap();
    let recorded: Vec<Option<String>> = redis::cmd("HMGET")
        .arg("t:{k}:lock")
        .arg(&["s", "sv"])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        recorded,
        [Some("s1".to_string()), Some(terms.version.to_string())]
    );
    let hold = Hold {
        kind: HoldKind::Lock,
        name: "k".into(),
        holder: "h".into(),
    };
    let left = sessions
        .attach("s1", std::slice::from_ref(&hold), terms.version)
        .await;
    let left = left.unwrap().expect("the session exists");
    let session: i64 = conn.pttl("t:{s1}:session").await.unwrap();
    let lock: i64 = conn.pttl("t:{k}:lock").await.unwrap();
    assert!(left <= 9_750, "the remaining TTL, not the TTL: {left}");
    assert!(
        (lock - session).abs() < 50,
        "lock {lock} ms, session {session} ms"
    );
    let fields: Vec<String> = conn.hkeys("t:{s1}:session").await.unwrap();
    assert!(fields.contains(&"lock|h|k".to_string()), "{fields:?}");

    let renewed = sessions
        .heartbeat("s1", Some(20_000))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((renewed.ttl_ms, renewed.holds), (20_000, 1));
    let lock: i64 = conn.pttl("t:{k}:lock").await.unwrap();
    assert!(lock > 19_900, "renewed with the session: {lock}");
    let state = sessions.state("s1").await.unwrap().unwrap();
    assert_eq!((state.ttl_ms, state.holds), (20_000, 1));
    // A renewal of an older version (a slow heartbeat) changes nothing.
    let stale = locks.renew("k", "h", Some(1000), Some(term)).await.unwrap();
    assert!(stale.expect("still the session's").lease_ms > 19_000);
    let lock: i64 = conn.pttl("t:{k}:lock").await.unwrap();
    assert!(lock > 19_000, "{lock}");
    // A direct heartbeat renews it no further than the session.
    let direct = locks.heartbeat("k", "h", Some(60_000)).await.unwrap();
    assert!(direct.expect("held").lease_ms <= 20_000);

    assert!(locks.release("k", "h", false).await.unwrap().is_some());
    let renewed = sessions.heartbeat("s1", None).await.unwrap().unwrap();
    assert_eq!((renewed.ttl_ms, renewed.holds), (20_000, 0), "forgotten");
    let fields: Vec<String> = conn.hkeys("t:{s1}:session").await.unwrap();
    assert_eq!(fields.len(), 2, "ttl and version only: {fields:?}");

    assert_eq!(sessions.delete("s1").await.unwrap(), Some(0));
    assert_eq!(sessions.attach("s1", &[hold], 0).await.unwrap(), None);
    assert_eq!(sessions.terms("s1").await.unwrap(), None);
    assert_eq!(sessions.heartbeat("s1", None).await.unwrap(), None);
    assert_eq!(sessions.delete("s1").await.unwrap(), None);
    let exists: bool = conn.exists("t:{s1}:session").await.unwrap();
    assert!(!exists);
}

/// The acquire path and body of a hold of `kind` on `name` (a multi-lock:
/// the set of `name`-1 and `name`-2), with `fields` added.
fn acquire_of(kind: &str, name: &str, fields: Value) -> (String, Value) {
    let (path, mut body) = match kind {
        "lock" => (format!("/locks/{name}/acquire"), json!({})),
        "fair" => (format!("/fair-locks/{name}/acquire"), json!({})),
        "read" => (format!("/rwlocks/{name}/read/acquire"), json!({})),
        "write" => (format!("/rwlocks/{name}/write/acquire"), json!({})),
        "sem" => (format!("/semaphores/{name}/acquire"), json!({"permits": 1})),
        "multi" => (
            "/multilocks/acquire".to_string(),
            json!({"names": [format!("{name}-1"), format!("{name}-2")]}),
        ),
        other => panic!("no kind {other}"),
    };
    for (field, value) in fields.as_object().expect("an object") {
        body[field] = value.clone();
    }
    (path, body)
}

/// Every kind of hold a session takes.
const KINDS: [&str; 6] = ["lock", "fair", "read", "write", "sem", "multi"];

/// Whether the hold of `kind` on `name` (from `acquire_of`) is held by
/// anyone, and how often (a multi-lock: its first lock).
async fn hold_count(app: &TestApp, kind: &str, name: &str) -> u64 {
    let state = match kind {
        "lock" => get(app, &format!("/locks/{name}")).await.1,
        "fair" => get(app, &format!("/fair-locks/{name}")).await.1,
        "read" => {
            return get(app, &format!("/rwlocks/{name}")).await.1["readers"]
                .as_u64()
                .unwrap();
        }
        "write" => {
            let state = get(app, &format!("/rwlocks/{name}")).await.1;
            return state["writer_hold_count"].as_u64().unwrap();
        }
        "sem" => {
            return get(app, &format!("/semaphores/{name}")).await.1["holders"]
                .as_u64()
                .unwrap();
        }
        _ => get(app, &format!("/locks/{name}-1")).await.1,
    };
    state["hold_count"].as_u64().unwrap()
}

/// What a holder already holds outside a session cannot be acquired again
/// in one, nor what it holds in one outside it or in another: 409
/// `session-mismatch` with nothing changed, on every kind of hold. So a
/// session's DELETE releases only its own holds.
#[tokio::test]
async fn acquiring_across_sessions_what_a_holder_holds_is_409_session_mismatch() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let (s, other) = (session(&app, 30_000).await, session(&app, 30_000).await);
    for name in ["mm-sem-a", "mm-sem-b"] {
        configure_semaphore(&app, name, 3).await;
    }
    for kind in KINDS {
        // Held without a session (a long lease), then asked for in one.
        let name = format!("mm-{kind}-a");
        let (path, body) = acquire_of(kind, &name, json!({"holder": "h1", "lease_ms": 60_000}));
        granted(&app, &path, body).await;
        let (path, body) = acquire_of(kind, &name, json!({"holder": "h1", "session": s}));
        let problem = assert_problem(app.post(&path, body).await, 409, "session-mismatch").await;
        assert!(!problem.to_string().contains(&s), "{problem}");
        assert_eq!(hold_count(&app, kind, &name).await, 1, "{kind}: unchanged");
        // Held in the session, then asked for without it, or in another.
        let name = format!("mm-{kind}-b");
        let (path, body) = acquire_of(kind, &name, json!({"holder": "h2", "session": s}));
        granted(&app, &path, body).await;
        for fields in [
            json!({"holder": "h2"}),
            json!({"holder": "h2", "session": other}),
        ] {
            let (path, body) = acquire_of(kind, &name, fields);
            assert_problem(app.post(&path, body).await, 409, "session-mismatch").await;
        }
        assert_eq!(hold_count(&app, kind, &name).await, 1, "{kind}: unchanged");
    }
    let deleted: Value = delete(&app, &format!("/sessions/{s}"))
        .await
        .json()
        .await
        .unwrap();
    // One hold of each kind, a multi-lock's two locks counted apart.
    assert_eq!(deleted, json!({"released": 7}));
    for kind in KINDS {
        let a = hold_count(&app, kind, &format!("mm-{kind}-a")).await;
        let b = hold_count(&app, kind, &format!("mm-{kind}-b")).await;
        assert_eq!(
            (a, b),
            (1, 0),
            "{kind}: only the session's hold was released"
        );
    }
}

/// A holder takes a hold in a session, releases it directly, and takes
/// the object again without the session (or in another one): that new
/// hold is not the session's. Its heartbeat neither renews nor cuts it, and
/// its DELETE does not release it.
#[tokio::test]
async fn a_session_never_renews_or_releases_a_later_hold_of_its_holder() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    configure_semaphore(&app, "v-sem", 2).await;
    let (s, other) = (session(&app, 5_000).await, session(&app, 30_000).await);
    for (kind, name, release) in [
        ("lock", "v-lock", "/locks/v-lock/holders/w"),
        ("read", "v-rw", "/rwlocks/v-rw/holders/w"),
        ("sem", "v-sem", "/semaphores/v-sem/holders/w"),
        ("write", "v-other", "/rwlocks/v-other/holders/w"),
    ] {
        let (path, body) = acquire_of(kind, name, json!({"holder": "w", "session": s}));
        granted(&app, &path, body).await;
        assert_eq!(delete(&app, release).await.status(), 200, "{name}");
        let again = match name {
            "v-other" => json!({"holder": "w", "session": other}),
            _ => json!({"holder": "w", "lease_ms": 60_000}),
        };
        let (path, body) = acquire_of(kind, name, again);
        granted(&app, &path, body).await;
    }
    let beat = app
        .post(&format!("/sessions/{s}/heartbeat"), json!({}))
        .await;
    let beat: Value = beat.json().await.unwrap();
    assert_eq!(beat["holds"], 0, "none of them is the session's: {beat}");
    let lock = app.state("v-lock").await;
    assert!(
        lock["ttl_ms"].as_u64().unwrap() > 50_000,
        "not cut to the session's TTL: {lock}"
    );
    let rw = get(&app, "/rwlocks/v-rw").await.1;
    assert!(rw["ttl_ms"].as_u64().unwrap() > 50_000, "{rw}");
    let rw = get(&app, "/rwlocks/v-other").await.1;
    assert!(rw["ttl_ms"].as_u64().unwrap() > 25_000, "{rw}");
    let deleted: Value = delete(&app, &format!("/sessions/{s}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(deleted, json!({"released": 0}));
    for (kind, name) in [
        ("lock", "v-lock"),
        ("read", "v-rw"),
        ("sem", "v-sem"),
        ("write", "v-other"),
    ] {
        assert_eq!(
            hold_count(&app, kind, name).await,
            1,
            "{name} is still held"
        );
    }
}

/// A direct heartbeat of a hold taken in a session renews it no further
/// than the session's remaining TTL, with or without `lease_ms`, on every
/// kind of hold; its answer says so. The session ends, and with it every
/// hold.
#[tokio::test]
async fn a_direct_heartbeat_renews_a_session_hold_no_further_than_the_session() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    configure_semaphore(&app, "c-sem", 1).await;
    let created = Instant::now();
    let s = session(&app, 2000).await;
    for kind in KINDS {
        let (path, body) = acquire_of(
            kind,
            &format!("c-{kind}"),
            json!({"holder": "w", "session": s}),
        );
        granted(&app, &path, body).await;
    }
    let beats = [
        (
            "/locks/c-lock/holders/w/heartbeat",
            json!({"lease_ms": 60_000}),
        ),
        (
            "/fair-locks/c-fair/holders/w/heartbeat",
            json!({"lease_ms": 60_000}),
        ),
        (
            "/rwlocks/c-read/holders/w/heartbeat",
            json!({"lease_ms": 60_000}),
        ),
        ("/rwlocks/c-write/holders/w/heartbeat", json!({})),
        (
            "/semaphores/c-sem/holders/w/heartbeat",
            json!({"lease_ms": 60_000}),
        ),
        (
            "/multilocks/heartbeat",
            json!({"names": ["c-multi-1", "c-multi-2"], "holder": "w", "lease_ms": 60_000}),
        ),
    ];
    for (path, body) in &beats {
        let beat = app.post(path, body.clone()).await;
        assert_eq!(beat.status(), 200, "{path}");
        let beat: Value = beat.json().await.unwrap();
        for field in ["lease_ms", "expires_in_ms"] {
            assert!(beat[field].as_u64().unwrap() <= 2000, "{path}: {beat}");
        }
    }
    // Later, a heartbeat without lease_ms renews for no more than is left.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let left = get(&app, &format!("/sessions/{s}")).await.1["expires_in_ms"]
        .as_u64()
        .unwrap();
    let beat = app
        .post("/semaphores/c-sem/holders/w/heartbeat", json!({}))
        .await;
    let beat: Value = beat.json().await.unwrap();
    assert!(
        beat["lease_ms"].as_u64().unwrap() <= left + 50,
        "{left} ms left: {beat}"
    );
    tokio::time::sleep(Duration::from_millis(2800).saturating_sub(created.elapsed())).await;
    for kind in KINDS {
        assert_eq!(
            hold_count(&app, kind, &format!("c-{kind}")).await,
            0,
            "{kind}"
        );
    }
}

/// Two session heartbeats overlap: one with a long TTL through an instance
/// whose path to Redis is 100 ms slower each way, and 150 ms later one with
/// a short TTL through the other. The later one sets the session's TTL, and
/// the slow one's renewal, arriving last, must not give the hold its long
/// lease: the hold ends with the session.
#[tokio::test]
async fn a_slow_session_heartbeat_never_outruns_a_later_one() {
    let redis = redis();
    let proxy = DelayProxy::start(redis.port(), Duration::from_millis(100)).await;
    let fast = spawn_app(test_config(&redis)).await;
    let slow = spawn_app(Config {
        redis_connect_timeout_ms: 3000,
        ..test_config_for(vec![proxy.url()])
    })
    .await;
    let s = session(&fast, 30_000).await;
    granted(
        &fast,
        "/locks/o-lock/acquire",
        json!({"holder": "w", "session": s}),
    )
    .await;
    let path = format!("/sessions/{s}/heartbeat");
    let long = slow.spawn_post(&path, json!({"ttl_ms": 60_000}));
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        fast.post(&path, json!({"ttl_ms": 1000})).await.status(),
        200
    );
    assert_eq!(long.await.unwrap().status(), 200);
    let state = get(&fast, &format!("/sessions/{s}")).await.1;
    assert_eq!(
        state["ttl_ms"], 1000,
        "the later heartbeat ran last: {state}"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(get(&fast, &format!("/sessions/{s}")).await.0, 404);
    let lock = fast.state("o-lock").await;
    assert_eq!(
        lock["locked"], false,
        "the hold outlived its session: {lock}"
    );
}

/// A hold whose end comes earlier (a session heartbeat with a shorter TTL,
/// a direct heartbeat with a shorter lease) wakes the waiters, who look
/// again by its new end: each is granted about when the hold ends, not
/// when the old end would have come (plain locks), nor at the queue's own
/// re-check (fair locks, rwlocks, semaphores, whose heads would otherwise
/// look again only after half the queue grace, 15 s here).
#[tokio::test]
async fn a_shortened_hold_wakes_its_waiters() {
    let redis = redis();
    let app = spawn_app(Config {
        queue_grace_ms: 30_000,
        ..test_config(&redis)
    })
    .await;
    configure_semaphore(&app, "w-sem", 1).await;
    let s = session(&app, 30_000).await;
    let mut waiting = Vec::new();
    for (kind, name, waiter) in [
        ("lock", "w-lock", "/locks/w-lock/acquire"),
        ("fair", "w-fair", "/fair-locks/w-fair/acquire"),
        ("read", "w-rw", "/rwlocks/w-rw/write/acquire"),
        ("sem", "w-sem", "/semaphores/w-sem/acquire"),
    ] {
        let (path, body) = acquire_of(kind, name, json!({"holder": "h", "session": s}));
        granted(&app, &path, body).await;
        waiting.push((
            name,
            app.spawn_post(waiter, json!({"holder": "x", "wait_ms": 8000})),
        ));
    }
    // And a plain lock held without a session, renewed with a shorter lease.
    app.must_acquire("w-own", json!({"holder": "h", "lease_ms": 30_000}))
        .await;
    waiting.push((
        "w-own",
        app.spawn_post(
            "/locks/w-own/acquire",
            json!({"holder": "x", "wait_ms": 8000}),
        ),
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        waiting.iter().all(|(_, w)| !w.is_finished()),
        "everyone waits"
    );
    let shortened = Instant::now();
    let beat = app
        .post(&format!("/sessions/{s}/heartbeat"), json!({"ttl_ms": 1000}))
        .await;
    assert_eq!(beat.status(), 200);
    assert_eq!(
        app.heartbeat("w-own", "h", json!({"lease_ms": 1000}))
            .await
            .status(),
        200
    );
    let mut late = Vec::new();
    for (name, waiter) in waiting {
        let answer = waiter.await.unwrap();
        let after = shortened.elapsed();
        if answer.status() != 201 || after > Duration::from_millis(3000) {
            late.push(format!("{name}: {} after {after:?}", answer.status()));
        }
    }
    assert!(
        late.is_empty(),
        "not granted soon after the hold was shortened to 1 s: {late:?}"
    );
}

/// An acquire in a session is bounded by its own deadline while Redis
/// stalls (`CLIENT PAUSE`), as one without a session is: with `wait_ms`
/// 200 it answers 503 at about 0.2 s, not after the (longer) Redis
/// response timeout.
#[tokio::test]
async fn a_session_acquire_answers_by_its_deadline_while_redis_stalls() {
    let redis = redis();
    let app = spawn_app(Config {
        redis_response_timeout_ms: 2000,
        ..test_config(&redis)
    })
    .await;
    let s = session(&app, 30_000).await;
    let mut conn = redis_conn(&redis).await;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(3000)
        .arg("ALL")
        .query_async(&mut conn)
        .await
        .unwrap();
    for body in [
        json!({"holder": "w", "wait_ms": 200}),
        json!({"holder": "w", "wait_ms": 200, "session": s}),
    ] {
        let started = Instant::now();
        let answer = app.acquire("d-lock", body.clone()).await;
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(600),
            "{body}: answered {} after {took:?}",
            answer.status()
        );
        assert_problem(answer, 503, "backend-unavailable").await;
    }
}

/// A grant in a session shows what the hold really has left as its lease
/// (the session's remaining TTL), not the session's full TTL; the hold's
/// own heartbeat says the same.
#[tokio::test]
async fn a_grant_in_a_session_shows_the_holds_real_lease() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let s = session(&app, 3000).await;
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let grant = granted(
        &app,
        "/locks/g-lock/acquire",
        json!({"holder": "w", "session": s}),
    )
    .await;
    let lease = grant["lease_ms"].as_u64().unwrap();
    assert!(lease <= 1000, "{grant}");
    assert_eq!(grant["expires_in_ms"], lease, "{grant}");
    assert_eq!(grant["heartbeat_interval_ms"], lease / 3, "{grant}");
    let beat: Value = app
        .heartbeat("g-lock", "w", json!({}))
        .await
        .json()
        .await
        .unwrap();
    assert!(beat["lease_ms"].as_u64().unwrap() <= lease, "{beat}");
}

/// What an acquire in a session costs does not grow with the session: with
/// thousands of holds attached, it (and a read of the session) runs no
/// command that reads the session's hash whole, as Redis's own command
/// statistics show.
#[tokio::test]
async fn an_acquire_in_a_session_never_reads_all_its_holds() {
    use redis::AsyncCommands;
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let s = session(&app, 60_000).await;
    let mut conn = redis_conn(&redis).await;
    let key = format!("latchkey:{{{s}}}:session");
    let holds: Vec<(String, u64)> = (0..5000).map(|i| (format!("lock|h{i}|n{i}"), 1)).collect();
    let _: () = conn.hset_multiple(&key, &holds).await.unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .unwrap();
    granted(
        &app,
        "/locks/x-lock/acquire",
        json!({"holder": "w", "session": s}),
    )
    .await;
    let (status, state) = get(&app, &format!("/sessions/{s}")).await;
    assert_eq!((status, state["holds"].clone()), (200, json!(5001)));
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    for whole in ["hgetall", "hkeys", "hvals", "hscan"] {
        assert!(
            !stats.contains(&format!("cmdstat_{whole}:")),
            "{whole} ran:\n{stats}"
        );
    }
}

/// RedLock holds keep to their session too: no mixing with a hold of the
/// same holder outside it, a session's DELETE leaves other holds alone,
/// and a direct heartbeat renews a session hold no further than the
/// session, on every node.
#[tokio::test]
async fn redlock_holds_keep_to_their_session() {
    let main = redis();
    let nodes: Vec<RedisServer> = (0..3).map(|_| redis()).collect();
    let app = spawn_app(Config {
        redlock_nodes: nodes.iter().map(RedisServer::url).collect(),
        ..test_config(&main)
    })
    .await;
    let created = Instant::now();
    let s = session(&app, 2000).await;
    let acquire = |name: &str| format!("/redlocks/{name}/acquire");
    granted(
        &app,
        &acquire("k-out"),
        json!({"holder": "h", "lease_ms": 60_000}),
    )
    .await;
    let mismatch = app
        .post(&acquire("k-out"), json!({"holder": "h", "session": s}))
        .await;
    assert_problem(mismatch, 409, "session-mismatch").await;
    granted(&app, &acquire("k-in"), json!({"holder": "h", "session": s})).await;
    let mismatch = app.post(&acquire("k-in"), json!({"holder": "h"})).await;
    assert_problem(mismatch, 409, "session-mismatch").await;
    let beat = app
        .post(
            "/redlocks/k-in/holders/h/heartbeat",
            json!({"lease_ms": 60_000}),
        )
        .await;
    let beat: Value = beat.json().await.unwrap();
    assert!(beat["lease_ms"].as_u64().unwrap() <= 2000, "{beat}");
    tokio::time::sleep(Duration::from_millis(2800).saturating_sub(created.elapsed())).await;
    assert_eq!(get(&app, "/redlocks/k-in").await.1["locked_on"], 0);
    assert_eq!(get(&app, "/redlocks/k-out").await.1["locked_on"], 3);
}

/// Below HTTP, on each primitive that keeps holds in its own state (locks,
/// rwlocks, semaphores): a hold taken in a session is renewed and released
/// for that session only, a renewal of an older version than the hold
/// applied changes nothing, a newer one may shorten it, and a direct
/// heartbeat renews it no further than the session's end.
#[tokio::test]
async fn a_hold_answers_only_its_own_session_and_its_newest_version() {
    use latchkey::coord::locks::{LockKind, Locks};
    use latchkey::coord::rwlocks::{Mode, RwLocks};
    use latchkey::coord::semaphores::Semaphores;
    use latchkey::coord::{Attempt, AttemptId, SessionTerm, Wait};

    let redis = redis();
    let store = test_store(&redis).await;
    let (locks, rwlocks) = (
        Locks::new(store.clone(), LockKind::Plain),
        RwLocks::new(store.clone(), 1000),
    );
    let semaphores = Semaphores::new(store.clone(), 1000);
    semaphores.set("p", 2).await.unwrap();
    // The session's end, `lease` ms from now (this machine's clock is
    // Redis's).
    let term = |id, version, lease: u64| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        Some(SessionTerm {
            id,
            version,
            end_ms: now.as_millis() as u64 + lease,
            owner: None,
        })
    };
    fn granted<T>(attempt: Attempt<T>) -> bool {
        matches!(attempt, Attempt::Granted(_))
    }
    let id = || AttemptId::new();
    assert!(granted(
        locks
            .try_acquire_in(
                "k",
                "h",
                10_000,
                Wait::default(),
                &id(),
                term("s1", 5, 10_000),
                ""
            )
            .await
            .unwrap()
    ));
    assert!(granted(
        rwlocks
            .try_acquire_in(
                "r",
                ("h", None),
                Mode::Read,
                (10_000, Wait::default()),
                &id(),
                term("s1", 5, 10_000)
            )
            .await
            .unwrap()
    ));
    assert!(granted(
        semaphores
            .try_acquire_in(
                "p",
                ("h", None),
                1,
                (10_000, Wait::default()),
                &id(),
                term("s1", 5, 10_000)
            )
            .await
            .unwrap()
    ));

    // Another session's renewal and release find nothing of theirs.
    let other = term("s2", 9, 60_000);
    assert!(
        locks
            .renew("k", "h", Some(60_000), other)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        rwlocks
            .renew("r", "h", Some(60_000), other)
            .await
            .unwrap()
            .is_none()
    );
    let renewed = semaphores
        .renew("p", "h", Some(60_000), other)
        .await
        .unwrap();
    assert!(renewed.is_none());
    assert!(!locks.release_in("k", "h", "s2").await.unwrap());
    assert!(
        !rwlocks
            .release_in("r", "h", Mode::Read, "s2")
            .await
            .unwrap()
    );
    assert!(!semaphores.release_in("p", "h", "s2").await.unwrap());

    // An older version changes nothing; a newer one shortens.
    let lease = |old: bool| {
        (
            if old { 60_000 } else { 2000 },
            term(
                "s1",
                if old { 4 } else { 6 },
                if old { 60_000 } else { 2000 },
            ),
        )
    };
    for old in [true, false] {
        let (ms, t) = lease(old);
        let lock = locks.renew("k", "h", Some(ms), t).await.unwrap().unwrap();
        let rw = rwlocks.renew("r", "h", Some(ms), t).await.unwrap().unwrap();
        let sem = semaphores
            .renew("p", "h", Some(ms), t)
            .await
            .unwrap()
            .unwrap();
        let left = [lock.lease_ms, rw.lease_ms, sem.lease_ms];
        let most = if old { 10_000 } else { 2000 };
        assert!(
            left.iter().all(|l| *l <= most && *l > most - 500),
            "{old}: {left:?}"
        );
    }
    // A direct heartbeat renews no further than the session's end.
    let lock = locks
        .heartbeat("k", "h", Some(60_000))
        .await
        .unwrap()
        .unwrap();
    let rw = rwlocks.heartbeat("r", "h", None).await.unwrap().unwrap();
    let sem = semaphores
        .heartbeat("p", "h", Some(60_000))
        .await
        .unwrap()
        .unwrap();
    for left in [lock.lease_ms, rw.lease_ms, sem.lease_ms] {
        assert!(left <= 2000, "{left}");
    }

    // The session's own release.
    assert!(locks.release_in("k", "h", "s1").await.unwrap());
    assert!(
        rwlocks
            .release_in("r", "h", Mode::Read, "s1")
            .await
            .unwrap()
    );
    assert!(semaphores.release_in("p", "h", "s1").await.unwrap());
    assert!(!locks.state("k").await.unwrap().locked);
    assert_eq!(rwlocks.state("r").await.unwrap().readers, 0);
    assert_eq!(semaphores.state("p").await.unwrap().unwrap().available, 2);
}

/// Redis stalls (`CLIENT PAUSE`) between a session heartbeat's renewal of
/// the session and its renewal of the session's holds: here a path to
/// Redis 200 ms slower each way, and a 1.5 s pause that starts after the
/// session script ran, before the hold's renewal reaches Redis. The
/// session ends 3 s after its renewal ran; its hold must not outlive it by
/// the length of the stall (the book: "never outlives its session by
/// more than a few ms"), as it does when the renewal, run after the stall,
/// counts the session's full TTL from then.
#[tokio::test]
async fn a_stall_between_a_session_heartbeat_and_its_renewals_does_not_extend_the_holds() {
    let redis = redis();
    let proxy = DelayProxy::start(redis.port(), Duration::from_millis(200)).await;
    let fast = spawn_app(test_config(&redis)).await;
    let slow = spawn_app(Config {
        redis_connect_timeout_ms: 3000,
        redis_response_timeout_ms: 6000,
        ..test_config_for(vec![proxy.url()])
    })
    .await;
    let s = session(&fast, 3000).await;
    granted(
        &fast,
        "/locks/st-lock/acquire",
        json!({"holder": "w", "session": s}),
    )
    .await;
    let path = format!("/sessions/{s}/heartbeat");
    // Once through the slow instance, so that its scripts are loaded.
    assert_eq!(slow.post(&path, json!({})).await.status(), 200);
    let started = Instant::now();
    let beat = slow.spawn_post(&path, json!({}));
    // The session script runs at about +200 ms, its reply is back at about
    // +400 ms, and the hold's renewal reaches Redis at about +600 ms.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut conn = redis_conn(&redis).await;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1500)
        .arg("ALL")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(beat.await.unwrap().status(), 200);
    tokio::time::sleep(Duration::from_millis(3700).saturating_sub(started.elapsed())).await;
    assert_eq!(
        get(&fast, &format!("/sessions/{s}")).await.0,
        404,
        "the session ended about 3.2 s after the heartbeat was sent"
    );
    let lock = fast.state("st-lock").await;
    assert_eq!(
        lock["locked"], false,
        "the hold outlived its session by the stall: {lock}"
    );
}
