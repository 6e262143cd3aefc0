//! RedLock (`/redlocks`) against a main redis-server and three or five
//! independent redis-servers as RedLock nodes, which the tests kill,
//! restart (empty) and freeze (SIGSTOP) to see what the quorum does.

use std::time::{Duration, Instant};

use latchkey::devredis::RedisServer;
use redis::AsyncCommands;
use reqwest::Response;
use serde_json::{Value, json};

use crate::helpers::*;

/// A main Redis and `n` RedLock nodes.
struct Deployment {
    main: RedisServer,
    nodes: Vec<RedisServer>,
}

impl Deployment {
    fn start(n: usize) -> Self {
        Deployment {
            main: redis(),
            nodes: (0..n).map(|_| redis()).collect(),
        }
    }

    fn config(&self) -> Config {
        Config {
            redlock_nodes: self.nodes.iter().map(RedisServer::url).collect(),
            ..test_config(&self.main)
        }
    }

    /// Whether node `i` has a hold (anyone's) on the lock `name`.
    async fn locked_on(&self, i: usize, name: &str) -> bool {
        let mut conn = redis_conn(&self.nodes[i]).await;
        conn.exists(format!("latchkey:{{{name}}}:redlock"))
            .await
            .expect("EXISTS")
    }

    /// Node `i`'s fencing counter for `name`.
    async fn fence_on(&self, i: usize, name: &str) -> u64 {
        let mut conn = redis_conn(&self.nodes[i]).await;
        let fence: Option<u64> = conn
            .get(format!("latchkey:{{{name}}}:redlock:fence"))
            .await
            .expect("GET");
        fence.unwrap_or(0)
    }
}

async fn acquire(app: &TestApp, name: &str, body: Value) -> Response {
    app.post(&format!("/redlocks/{name}/acquire"), body).await
}

async fn must_acquire(app: &TestApp, name: &str, body: Value) -> Value {
    let response = acquire(app, name, body).await;
    assert_eq!(response.status(), 201, "acquire {name}");
    response.json().await.expect("grant is JSON")
}

async fn heartbeat(app: &TestApp, name: &str, holder: &str, body: Value) -> Response {
    app.post(
        &format!("/redlocks/{name}/holders/{holder}/heartbeat"),
        body,
    )
    .await
}

async fn release(app: &TestApp, name: &str, holder: &str) -> Response {
    app.client
        .delete(app.url(&format!("/redlocks/{name}/holders/{holder}")))
        .send()
        .await
        .expect("sent")
}

async fn state(app: &TestApp, name: &str) -> Value {
    let response = app
        .client
        .get(app.url(&format!("/redlocks/{name}")))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), 200);
    response.json().await.expect("state is JSON")
}

#[tokio::test]
async fn a_grant_on_every_node_excludes_other_holders_until_released() {
    let deployment = Deployment::start(3);
    let app = spawn_app(deployment.config()).await;

    let response = acquire(&app, "r", json!({"holder": "x", "lease_ms": 30000})).await;
    assert_eq!(response.status(), 201);
    assert_eq!(
        response.headers()["location"].to_str().unwrap(),
        "/redlocks/r/holders/x"
    );
    let grant: Value = response.json().await.unwrap();
    assert_eq!(
        grant["nodes"],
        json!({"acquired": 3, "total": 3}),
        "{grant}"
    );
    assert_eq!(grant["holder"], "x");
    assert_eq!(grant["hold_count"], 1);
    assert_eq!(grant["lease_ms"], 30000);
    assert_eq!(grant["heartbeat_interval_ms"], 10000);
    let validity = grant["validity_ms"].as_u64().unwrap();
    // lease − elapsed − drift (300 + 2 ms), and the request took a little.
    assert!(
        validity <= 30000 - 302 && validity > 29000,
        "validity {validity}"
    );
    assert_eq!(grant["expires_in_ms"], grant["validity_ms"]);
    let token = grant["fencing_token"].as_u64().unwrap();
    assert!(token >= 1);
    for i in 0..3 {
        assert!(deployment.locked_on(i, "r").await, "held on node {i}");
    }

    // Another holder: 409 with when enough of the holds end for a quorum.
    let refused = assert_problem(
        acquire(&app, "r", json!({"holder": "y"})).await,
        409,
        "lock-held",
    )
    .await;
    let hint = refused["retry_after_ms"].as_u64().unwrap();
    assert!((28000..=30000).contains(&hint), "hint {hint}");
    for i in 0..3 {
        assert!(deployment.locked_on(i, "r").await, "still held on node {i}");
    }

    // The holder again: renewed, same token.
    let again = must_acquire(&app, "r", json!({"holder": "x", "lease_ms": 20000})).await;
    assert_eq!(again["fencing_token"], token);
    assert_eq!(again["hold_count"], 1);
    assert_eq!(again["lease_ms"], 20000);

    // State on every node, without a holder id.
    let response = app.client.get(app.url("/redlocks/r")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(!text.contains("\"x\""), "no holder id in {text}");
    let s: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(s["name"], "r");
    assert_eq!(s["locked_on"], 3);
    assert_eq!(s["total"], 3);
    for (i, node) in s["nodes"].as_array().unwrap().iter().enumerate() {
        assert_eq!(node["node"], i);
        assert_eq!(node["reachable"], true);
        assert_eq!(node["locked"], true);
        let ttl = node["ttl_ms"].as_u64().unwrap();
        assert!(ttl > 15000 && ttl <= 20000, "ttl {ttl}");
    }

    // Heartbeat: a new lease on every node; without one, the lease it has.
    let renewed = heartbeat(&app, "r", "x", json!({"lease_ms": 40000})).await;
    assert_eq!(renewed.status(), 200);
    let renewed: Value = renewed.json().await.unwrap();
    assert_eq!(renewed["lease_ms"], 40000);
    assert_eq!(renewed["fencing_token"], token);
    assert_eq!(renewed["nodes"], json!({"acquired": 3, "total": 3}));
    assert!(renewed["validity_ms"].as_u64().unwrap() > 39000);
    let kept: Value = heartbeat(&app, "r", "x", json!({}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(kept["lease_ms"], 40000);
    assert!(
        state(&app, "r").await["nodes"][1]["ttl_ms"]
            .as_u64()
            .unwrap()
            > 35000
    );
    assert_problem(heartbeat(&app, "r", "y", json!({})).await, 404, "not-held").await;
    assert_problem(release(&app, "r", "y").await, 404, "not-held").await;

    // Release frees every node; then the holder holds nothing.
    let released = release(&app, "r", "x").await;
    assert_eq!(released.status(), 200);
    assert_eq!(
        released.json::<Value>().await.unwrap(),
        json!({"released": true})
    );
    for i in 0..3 {
        assert!(!deployment.locked_on(i, "r").await, "free on node {i}");
    }
    assert_eq!(state(&app, "r").await["locked_on"], 0);
    assert_problem(release(&app, "r", "x").await, 404, "not-held").await;
    assert_problem(heartbeat(&app, "r", "x", json!({})).await, 404, "not-held").await;

    // The next holder gets a larger token.
    let next = must_acquire(&app, "r", json!({"holder": "y"})).await;
    assert!(next["fencing_token"].as_u64().unwrap() > token);

    // Bad input is refused before any node is asked.
    assert_problem(
        acquire(&app, "bad{name}", json!({})).await,
        400,
        "invalid-name",
    )
    .await;
    assert_problem(
        acquire(&app, "r", json!({"lease_ms": 1})).await,
        400,
        "out-of-range",
    )
    .await;
}

#[tokio::test]
async fn one_node_of_three_down_still_grants_two_down_is_quorum_unavailable_at_once() {
    let mut deployment = Deployment::start(3);
    let app = spawn_app(deployment.config()).await;

    deployment.nodes[2].stop();
    let grant = must_acquire(&app, "k", json!({"holder": "x"})).await;
    assert_eq!(grant["nodes"], json!({"acquired": 2, "total": 3}));
    let s = state(&app, "k").await;
    assert_eq!(s["locked_on"], 2);
    assert_eq!(s["nodes"][2]["reachable"], false);
    // Held on two of three: still 409 for others.
    assert_problem(
        acquire(&app, "k", json!({"holder": "y"})).await,
        409,
        "lock-held",
    )
    .await;

    deployment.nodes[1].stop();
    let started = Instant::now();
    let problem = assert_problem(
        acquire(&app, "other", json!({"holder": "y", "wait_ms": 5000})).await,
        503,
        "quorum-unavailable",
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "answered after {:?}",
        started.elapsed()
    );
    assert!(
        problem["detail"].as_str().unwrap().contains("1 of 3"),
        "{problem}"
    );
    // What the one reachable node granted was given back.
    assert!(!deployment.locked_on(0, "other").await);
    // The hold on k can no longer be renewed on a quorum, but the nodes
    // that are down may still hold it: 503, not 404.
    assert_problem(
        heartbeat(&app, "k", "x", json!({})).await,
        503,
        "quorum-unavailable",
    )
    .await;
}

#[tokio::test]
async fn frozen_nodes_time_out_quickly_and_what_they_took_is_given_back() {
    let deployment = Deployment::start(3);
    let app = spawn_app(deployment.config()).await;
    // Connections to every node are open before the freeze.
    must_acquire(&app, "warm", json!({"holder": "w"})).await;

    deployment.nodes[1].pause();
    deployment.nodes[2].pause();
    let started = Instant::now();
    assert_problem(
        acquire(&app, "f", json!({"holder": "x", "lease_ms": 30000})).await,
        503,
        "quorum-unavailable",
    )
    .await;
    let took = started.elapsed();
    deployment.nodes[1].resume();
    deployment.nodes[2].resume();
    // Per-node timeout 100 ms for the tries, 100 ms for the give-back.
    assert!(took < Duration::from_millis(800), "answered after {took:?}");
    assert!(!deployment.locked_on(0, "f").await, "given back on node 0");
    // The frozen nodes ran the acquire late, then the give-back: nothing
    // is left on any node.
    let clean = eventually(Duration::from_secs(3), || async {
        !deployment.locked_on(1, "f").await && !deployment.locked_on(2, "f").await
    })
    .await;
    assert!(clean, "a late grant was left on a frozen node");
    // And the lock can be had on every node right away.
    let grant = must_acquire(&app, "f", json!({"holder": "y"})).await;
    assert_eq!(grant["nodes"]["acquired"], 3);
}

#[tokio::test]
async fn a_slow_node_does_not_count_and_shrinks_the_validity() {
    let deployment = Deployment::start(3);
    let app = spawn_app(deployment.config()).await;
    let healthy = must_acquire(&app, "warm", json!({"holder": "w", "lease_ms": 30000})).await;
    assert_eq!(healthy["nodes"]["acquired"], 3);

    deployment.nodes[0].pause();
    let started = Instant::now();
    let slow = acquire(&app, "s", json!({"holder": "x", "lease_ms": 30000})).await;
    let took = started.elapsed();
    deployment.nodes[0].resume();
    assert_eq!(slow.status(), 201);
    let slow: Value = slow.json().await.unwrap();
    assert_eq!(slow["nodes"], json!({"acquired": 2, "total": 3}));
    // The try waited the per-node timeout (100 ms for a 30 s lease) for
    // the frozen node, and that time is off the validity.
    let validity = slow["validity_ms"].as_u64().unwrap();
    assert!(validity <= 30000 - 302 - 100, "validity {validity}");
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_millis(800),
        "took {took:?}"
    );
    let healthy_validity = healthy["validity_ms"].as_u64().unwrap();
    assert!(
        healthy_validity > validity + 50,
        "healthy {healthy_validity} vs slow {validity}"
    );
    // The release reaches every node, the one that was slow included.
    assert_eq!(release(&app, "s", "x").await.status(), 200);
    for i in 0..3 {
        assert!(!deployment.locked_on(i, "s").await, "free on node {i}");
    }
}

#[tokio::test]
async fn a_partial_grant_is_given_back_on_every_node() {
    let mut deployment = Deployment::start(3);
    let app = spawn_app(deployment.config()).await;
    must_acquire(&app, "p", json!({"holder": "x", "lease_ms": 30000})).await;

    // Node 0 restarts empty: it is free, the other two still refuse.
    deployment.nodes[0].restart().unwrap();
    let refused = assert_problem(
        acquire(&app, "p", json!({"holder": "y"})).await,
        409,
        "lock-held",
    )
    .await;
    // One more node is needed for a quorum: the sooner of the two holds.
    let hint = refused["retry_after_ms"].as_u64().unwrap();
    assert!((28000..=30000).contains(&hint), "hint {hint}");
    assert!(
        !deployment.locked_on(0, "p").await,
        "node 0's grant was given back"
    );
    assert!(deployment.locked_on(1, "p").await && deployment.locked_on(2, "p").await);
}

#[tokio::test]
async fn losing_a_quorum_of_nodes_loses_the_hold() {
    let mut deployment = Deployment::start(3);
    let app = spawn_app(deployment.config()).await;
    must_acquire(&app, "h", json!({"holder": "x"})).await;
    must_acquire(&app, "g", json!({"holder": "x"})).await;
    deployment.nodes[1].restart().unwrap();
    deployment.nodes[2].restart().unwrap();

    // Renewal: only one node still has the hold; it is removed there too,
    // so that it blocks nobody.
    assert_problem(heartbeat(&app, "h", "x", json!({})).await, 404, "not-held").await;
    assert!(!deployment.locked_on(0, "h").await);
    assert_eq!(state(&app, "h").await["locked_on"], 0);

    // Release of a hold that only one node still had: 200, released false.
    let released = release(&app, "g", "x").await;
    assert_eq!(released.status(), 200);
    assert_eq!(
        released.json::<Value>().await.unwrap(),
        json!({"released": false})
    );
    assert!(!deployment.locked_on(0, "g").await);
}

#[tokio::test]
async fn tokens_strictly_increase_while_nodes_restart_empty_one_at_a_time() {
    let mut deployment = Deployment::start(3);
    let app = spawn_app(deployment.config()).await;
    let mut last = 0;
    for round in 0..7 {
        let grant = must_acquire(&app, "t", json!({"holder": format!("h{round}")})).await;
        let token = grant["fencing_token"].as_u64().unwrap();
        assert!(token > last, "round {round}: token {token} after {last}");
        // A node that came back is used again without restarting the app.
        assert_eq!(grant["nodes"]["acquired"], 3, "round {round}: {grant}");
        // Every node's counter was raised to the grant's token.
        for i in 0..3 {
            assert_eq!(
                deployment.fence_on(i, "t").await,
                token,
                "round {round}, node {i}"
            );
        }
        last = token;
        assert_eq!(release(&app, "t", &format!("h{round}")).await.status(), 200);
        deployment.nodes[round % 3].restart().unwrap();
    }

    // A node that is down for a while: 2 of 3, then back to 3 of 3.
    deployment.nodes[1].stop();
    let grant = must_acquire(&app, "t", json!({"holder": "d"})).await;
    assert_eq!(grant["nodes"]["acquired"], 2);
    assert!(grant["fencing_token"].as_u64().unwrap() > last);
    last = grant["fencing_token"].as_u64().unwrap();
    assert_eq!(release(&app, "t", "d").await.status(), 200);
    deployment.nodes[1].restart().unwrap();
    let grant = must_acquire(&app, "t", json!({"holder": "e"})).await;
    assert_eq!(grant["nodes"]["acquired"], 3);
    assert!(grant["fencing_token"].as_u64().unwrap() > last);
}

#[tokio::test]
async fn five_nodes_tolerate_two_down_but_not_three() {
    let mut deployment = Deployment::start(5);
    let app = spawn_app(deployment.config()).await;
    let grant = must_acquire(&app, "five", json!({"holder": "x"})).await;
    assert_eq!(grant["nodes"], json!({"acquired": 5, "total": 5}));
    assert_problem(
        acquire(&app, "five", json!({"holder": "y"})).await,
        409,
        "lock-held",
    )
    .await;

    deployment.nodes[0].stop();
    deployment.nodes[3].stop();
    let grant = must_acquire(&app, "five-b", json!({"holder": "x"})).await;
    assert_eq!(grant["nodes"], json!({"acquired": 3, "total": 5}));
    let renewed: Value = heartbeat(&app, "five", "x", json!({}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(renewed["nodes"], json!({"acquired": 3, "total": 5}));

    deployment.nodes[4].stop();
    let started = Instant::now();
    assert_problem(
        acquire(&app, "five-c", json!({"holder": "y"})).await,
        503,
        "quorum-unavailable",
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(1));
    for i in [1, 2] {
        assert!(
            !deployment.locked_on(i, "five-c").await,
            "given back on node {i}"
        );
    }
    let s = state(&app, "five").await;
    assert_eq!(s["total"], 5);
    assert_eq!(s["locked_on"], 2);
    let reachable: Vec<bool> = s["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["reachable"].as_bool().unwrap())
        .collect();
    assert_eq!(reachable, vec![false, true, true, false, false]);
}

#[tokio::test]
async fn a_long_poll_waiter_gets_the_redlock_when_the_holder_releases_on_another_instance() {
    let deployment = Deployment::start(3);
    let a = spawn_app(deployment.config()).await;
    let b = spawn_app(deployment.config()).await;
    let held = must_acquire(&a, "w", json!({"holder": "x", "lease_ms": 30000})).await;

    let waiter = b.spawn_post(
        "/redlocks/w/acquire",
        json!({"holder": "y", "wait_ms": 10000}),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the waiter waits");
    let released = Instant::now();
    assert_eq!(release(&a, "w", "x").await.status(), 200);
    let response = waiter.await.unwrap();
    // Woken by the release (the blocking lease had 29 s left).
    assert!(
        released.elapsed() < Duration::from_secs(3),
        "woken after {:?}",
        released.elapsed()
    );
    assert_eq!(response.status(), 201);
    let grant: Value = response.json().await.unwrap();
    assert_eq!(grant["holder"], "y");
    assert!(grant["fencing_token"].as_u64() > held["fencing_token"].as_u64());

    // SSE: a waiting event, then a timeout with the 409 problem.
    let response = a
        .client
        .post(a.url("/redlocks/w/acquire"))
        .header("accept", "text/event-stream")
        .json(&json!({"holder": "z", "wait_ms": 300}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let events = read_sse(response).await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"waiting"), "{events:?}");
    assert_eq!(names.last(), Some(&"timeout"), "{events:?}");
    assert_eq!(events.last().unwrap().1["type"], "/problems/lock-held");
}

#[tokio::test]
async fn every_route_answers_503_when_no_nodes_are_configured() {
    let main = redis();
    let app = spawn_app(test_config(&main)).await;
    assert_problem(
        acquire(&app, "n", json!({})).await,
        503,
        "redlock-not-configured",
    )
    .await;
    assert_problem(
        heartbeat(&app, "n", "x", json!({})).await,
        503,
        "redlock-not-configured",
    )
    .await;
    assert_problem(release(&app, "n", "x").await, 503, "redlock-not-configured").await;
    let response = app.client.get(app.url("/redlocks/n")).send().await.unwrap();
    assert_problem(response, 503, "redlock-not-configured").await;
    // Other primitives are unaffected.
    assert_eq!(app.acquire("n", json!({})).await.status(), 201);
}

/// Below HTTP: a give-back that lands before its attempt (the attempt was
/// late on a slow node) leaves a tombstone, so the attempt grants nothing
/// on any node; a give-back never drops a hold another attempt made.
#[tokio::test]
async fn an_attempt_given_back_before_it_arrives_grants_nothing() {
    use latchkey::coord::redlock::RedLocks;
    use latchkey::coord::{Attempt, AttemptId};
    use latchkey::metrics::Metrics;
    use latchkey::store::{Store, StoreConfig};

    let deployment = Deployment::start(3);
    let config = deployment.config();
    let main_config = StoreConfig::from_config(&config).unwrap();
    let main = Store::open(&main_config, Metrics::new()).await.unwrap();
    let redlocks = RedLocks::open(&config.redlock_nodes, &main_config, main, Metrics::new())
        .await
        .unwrap();

    let late = AttemptId::new();
    assert!(!redlocks.undo("u", "x", &late, 30000).await.unwrap());
    let tried = redlocks.try_acquire("u", "x", 30000, &late).await;
    assert!(tried.is_err(), "{tried:?}");
    for i in 0..3 {
        assert!(!deployment.locked_on(i, "u").await, "nothing on node {i}");
    }

    let first = AttemptId::new();
    let granted = redlocks.try_acquire("u", "x", 30000, &first).await.unwrap();
    assert!(matches!(granted, Attempt::Granted(_)), "{granted:?}");
    // Running the same attempt again returns its grant; a re-entry by
    // another attempt of the same holder keeps it; undoing that re-entry
    // leaves the hold in place.
    let again = redlocks.try_acquire("u", "x", 30000, &first).await.unwrap();
    assert!(matches!(again, Attempt::Granted(_)), "{again:?}");
    let reentry = AttemptId::new();
    let renewed = redlocks
        .try_acquire("u", "x", 30000, &reentry)
        .await
        .unwrap();
    assert!(matches!(renewed, Attempt::Granted(_)), "{renewed:?}");
    assert!(!redlocks.undo("u", "x", &reentry, 30000).await.unwrap());
    for i in 0..3 {
        assert!(deployment.locked_on(i, "u").await, "still held on node {i}");
    }
    assert!(redlocks.undo("u", "x", &first, 30000).await.unwrap());
    for i in 0..3 {
        assert!(
            !deployment.locked_on(i, "u").await,
            "given back on node {i}"
        );
    }
}
