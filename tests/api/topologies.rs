//! Redis Sentinel and Redis Cluster deployments, with real processes: a
//! three-master cluster built by `redis-cli --cluster create`, and a master,
//! replica and Sentinel that fail over.

use std::time::{Duration, Instant};

use latchkey::config::RedisMode;
use latchkey::devredis::{RedisCluster, RedisServer};
use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn locks_work_on_redis_cluster_across_slots_and_instances() {
    let cluster = RedisCluster::start(3).expect("cluster starts");
    let config = Config {
        redis_mode: RedisMode::Cluster,
        ..test_config_for(cluster.urls())
    };
    let a = spawn_app(config.clone()).await;
    let b = spawn_app(config).await;

    // Names spread over slots owned by different masters; each script's
    // keys share the name's hash tag, so each runs on one node.
    let names: Vec<String> = (0..12).map(|i| format!("cl-{i}")).collect();
    for name in &names {
        let grant = a
            .must_acquire(name, json!({"holder": "x", "lease_ms": 30000}))
            .await;
        assert_eq!(grant["fencing_token"], 1, "{name}");
        assert_problem(
            b.acquire(name, json!({"holder": "y"})).await,
            409,
            "lock-held",
        )
        .await;
        assert_eq!(b.state(name).await["locked"], true);
    }
    // Pub/sub reaches the other instance whichever node published.
    for name in names.iter().take(6) {
        let waiter = b.spawn_post(
            &format!("/locks/{name}/acquire"),
            json!({"holder": "y", "wait_ms": 20000}),
        );
        b.wait_for_waiters(name, 1).await;
        let released = Instant::now();
        assert_eq!(a.release(name, "x").await.status(), 200);
        let response = waiter.await.unwrap();
        assert_eq!(response.status(), 201, "{name}");
        assert!(
            released.elapsed() < Duration::from_secs(2),
            "{name}: woken after {:?}",
            released.elapsed()
        );
        let grant: serde_json::Value = response.json().await.unwrap();
        assert_eq!(grant["fencing_token"], 2, "{name}");
    }
    // Fair locks, rwlocks and semaphores: every script's keys (state,
    // queue, readers, holds) share the name's hash tag; waiters queued on
    // b are woken from a.
    for name in names.iter().take(4) {
        let configured = a
            .client
            .put(a.url(&format!("/semaphores/{name}")))
            .json(&json!({"permits": 1}))
            .send()
            .await
            .unwrap();
        assert_eq!(configured.status(), 200, "{name}");
        let kinds = [
            (
                format!("/semaphores/{name}/acquire"),
                format!("/semaphores/{name}/holders/x"),
            ),
            (
                format!("/fair-locks/{name}/acquire"),
                format!("/fair-locks/{name}/holders/x"),
            ),
            (
                format!("/rwlocks/{name}/write/acquire"),
                format!("/rwlocks/{name}/holders/x"),
            ),
        ];
        for (acquire, hold) in kinds {
            assert_eq!(
                a.post(&acquire, json!({"holder": "x"})).await.status(),
                201,
                "{acquire}"
            );
            let waiter = b.spawn_post(&acquire, json!({"holder": "y", "wait_ms": 20000}));
            tokio::time::sleep(Duration::from_millis(200)).await;
            let released = a.client.delete(a.url(&hold)).send().await.unwrap();
            assert_eq!(released.status(), 200, "{hold}");
            assert_eq!(waiter.await.unwrap().status(), 201, "{acquire}");
        }
    }
    // Multi-locks: names in different slots are taken one at a time in
    // sorted order; a conflict gives back what was taken, so nothing of a
    // refused set stays held, and a set is released as one.
    let set: Vec<String> = (0..6).map(|i| format!("set-{i}")).collect();
    let response = a
        .post("/multilocks/acquire", json!({"names": set, "holder": "m"}))
        .await;
    assert_eq!(response.status(), 201);
    let problem = assert_problem(
        b.post(
            "/multilocks/acquire",
            json!({"names": ["free-1", "set-3", "free-2"], "holder": "n"}),
        )
        .await,
        409,
        "lock-held",
    )
    .await;
    assert_eq!(problem["blocked_by"], json!(["set-3"]));
    for name in ["free-1", "free-2"] {
        assert_eq!(b.state(name).await["locked"], false, "{name} given back");
    }
    let waiter = b.spawn_post(
        "/multilocks/acquire",
        json!({"names": ["free-1", "set-3"], "holder": "n", "wait_ms": 10000}),
    );
    b.wait_for_waiters("set-3", 1).await;
    let released = a
        .post("/multilocks/release", json!({"names": set, "holder": "m"}))
        .await;
    assert_eq!(released.status(), 200);
    assert_eq!(waiter.await.unwrap().status(), 201);
    let ready = a.client.get(a.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
}

#[tokio::test]
async fn sentinel_mode_follows_a_failover_to_the_promoted_replica() {
    let mut master = redis();
    let master_port = master.port().to_string();
    let replica =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &master_port]).expect("replica");
    let sentinel = RedisServer::start_sentinel("mymaster", master.port(), None).expect("sentinel");
    let sentinel_client = redis::Client::open(sentinel.url()).unwrap();
    let mut sentinel_conn = sentinel_client
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    // The Sentinel must know the replica before the master dies.
    assert!(
        eventually(Duration::from_secs(15), || {
            let mut conn = sentinel_conn.clone();
            async move {
                let replicas: Vec<redis::Value> = redis::cmd("SENTINEL")
                    .arg("REPLICAS")
                    .arg("mymaster")
                    .query_async(&mut conn)
                    .await
                    .unwrap_or_default();
                !replicas.is_empty()
            }
        })
        .await,
        "sentinel discovers the replica"
    );

    let app = spawn_app(Config {
        redis_mode: RedisMode::Sentinel,
        sentinel_master: "mymaster".into(),
        ..test_config_for(vec![sentinel.url()])
    })
    .await;
    app.must_acquire("before", json!({"holder": "a"})).await;

    master.stop();
    let promoted = eventually(Duration::from_secs(20), || {
        let mut conn = sentinel_conn.clone();
        let replica_port = replica.port().to_string();
        async move {
            let addr: Vec<String> = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg("mymaster")
                .query_async(&mut conn)
                .await
                .unwrap_or_default();
            addr.get(1) == Some(&replica_port)
        }
    })
    .await;
    assert!(promoted, "sentinel promotes the replica");

    // Requests recover on the new master (503s in between are expected).
    assert!(
        eventually(Duration::from_secs(10), || async {
            app.acquire("after", json!({"holder": "b", "lease_ms": 30000}))
                .await
                .status()
                == 201
        })
        .await,
        "acquire succeeds on the promoted master"
    );
    // The hub re-subscribed there too: a release wakes a waiter at once.
    let waiter = app.spawn_post(
        "/locks/after/acquire",
        json!({"holder": "c", "wait_ms": 20000}),
    );
    app.wait_for_waiters("after", 1).await;
    let released = Instant::now();
    assert_eq!(app.release("after", "b").await.status(), 200);
    assert_eq!(waiter.await.unwrap().status(), 201);
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "woken after {:?}",
        released.elapsed()
    );
    let _: String = redis::cmd("PING")
        .query_async(&mut sentinel_conn)
        .await
        .unwrap();
}

/// On a Redis Cluster the libraries are loaded on every master (redis-rs
/// sends `FUNCTION LOAD` to each), and a master that lost them
/// (`FUNCTION FLUSH` everywhere, as after restarts without persistence)
/// is given one again by the first call there that misses it, and all of
/// them by `/readyz`.
#[tokio::test]
async fn a_cluster_gets_its_function_libraries_again_on_every_master() {
    let cluster = RedisCluster::start(3).expect("cluster starts");
    let app = spawn_app(Config {
        redis_mode: RedisMode::Cluster,
        ..test_config_for(cluster.urls())
    })
    .await;
    let every = latchkey::store::scripts::ALL.len();
    for node in &cluster.nodes {
        let present = libraries(node, "latchkey_").await;
        assert_eq!(present.len(), every, "node :{}", node.port());
        flush_functions(node).await;
    }
    // Twelve names reach every master's slots.
    for i in 0..12 {
        let name = format!("fl-{i}");
        let grant = app.must_acquire(&name, json!({"holder": "x"})).await;
        assert_eq!(grant["fencing_token"], 1, "{name}");
        assert_eq!(app.release(&name, "x").await.status(), 200, "{name}");
    }
    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    for node in &cluster.nodes {
        let present = libraries(node, "latchkey_").await;
        assert_eq!(present.len(), every, "node :{}", node.port());
    }
}
