//! Redis over TLS (`rediss://`): servers that listen over TLS only, with a
//! CA, server and client certificates made for each test by `openssl`
//! (see `TestPki`). Standalone with the CA, standalone requiring client
//! certificates, Sentinel, Cluster and RedLock nodes; each grants, wakes a
//! waiter through the pub/sub connection, and releases.

use std::time::Duration;

use latchkey::config::RedisMode;
use latchkey::devredis::{RedisCluster, RedisServer};
use serde_json::json;

use crate::helpers::*;

async fn readyz(app: &TestApp) -> u16 {
    let response = app.client.get(app.url("/readyz")).send().await.unwrap();
    response.status().as_u16()
}

#[tokio::test]
async fn standalone_over_tls_trusts_the_configured_ca() {
    let pki = TestPki::generate();
    let redis = RedisServer::start_tls(&pki.server(false), &[]).expect("TLS redis-server");
    assert!(redis.url().starts_with("rediss://"));

    // The system's roots do not know the test CA.
    let untrusting = spawn_app_unready(test_config(&redis)).await;
    assert_eq!(readyz(&untrusting).await, 503);

    let app = spawn_app(pki.trusted_by(test_config(&redis), false)).await;
    assert_eq!(readyz(&app).await, 200);
    hand_over(&app, "/locks/tls-standalone", "acquire").await;
}

#[tokio::test]
async fn a_server_that_requires_client_certificates_lets_in_only_latchkey_with_one() {
    let pki = TestPki::generate();
    let tls = pki.server(true);
    let redis = RedisServer::start_tls(&tls, &["--repl-diskless-sync-delay", "0"])
        .expect("TLS redis-server");
    let master_port = redis.port().to_string();
    let replica = RedisServer::start_tls(&tls, &["--replicaof", "127.0.0.1", &master_port])
        .expect("TLS replica");

    let without = spawn_app_unready(pki.trusted_by(test_config(&redis), false)).await;
    assert_eq!(readyz(&without).await, 503);
    assert_problem(
        without.acquire("mtls", json!({"holder": "x"})).await,
        503,
        "backend-unavailable",
    )
    .await;

    // With min_replicas, writes go through the dedicated connections (and
    // WAIT for the replica, which replicates over TLS as well).
    let replicating = replica_in_sync(&redis).await;
    assert!(
        replicating,
        "the replica syncs over TLS: {}",
        replica.log_tail()
    );
    let config = Config {
        min_replicas: 1,
        // WAIT gets half the response timeout; leave room for a loaded CI.
        redis_response_timeout_ms: 4000,
        ..pki.trusted_by(test_config(&redis), true)
    };
    let with = spawn_app(config).await;
    assert_eq!(readyz(&with).await, 200);
    hand_over(&with, "/locks/mtls", "acquire").await;
}

#[tokio::test]
async fn sentinel_lookups_and_the_master_go_over_tls() {
    let pki = TestPki::generate();
    let tls = pki.server(true);
    let master = RedisServer::start_tls(&tls, &[]).expect("TLS master");
    let sentinel =
        RedisServer::start_sentinel("tlsmaster", master.port(), Some(&tls)).expect("sentinel");
    assert!(sentinel.url().starts_with("rediss://"));
    let config = Config {
        redis_mode: RedisMode::Sentinel,
        sentinel_master: "tlsmaster".into(),
        ..test_config_for(vec![sentinel.url()])
    };
    let app = spawn_app(pki.trusted_by(config, true)).await;
    assert_eq!(readyz(&app).await, 200);
    hand_over(&app, "/locks/tls-sentinel", "acquire").await;
}

#[tokio::test]
async fn cluster_nodes_and_their_bus_go_over_tls() {
    let pki = TestPki::generate();
    let cluster = RedisCluster::start_tls(3, &pki.server(true)).expect("TLS cluster");
    let config = Config {
        redis_mode: RedisMode::Cluster,
        ..test_config_for(cluster.urls())
    };
    let app = spawn_app(pki.trusted_by(config, true)).await;
    assert_eq!(readyz(&app).await, 200);
    // Names in slots of different masters: each release publishes
    // (SPUBLISH) on its name's node, where the hub's own cluster
    // connection, over TLS with the client certificate too, subscribed
    // the waiter's channel (SSUBSCRIBE).
    for i in 0..6 {
        hand_over(&app, &format!("/locks/tls-cluster-{i}"), "acquire").await;
    }
}

#[tokio::test]
async fn redlock_nodes_go_over_tls() {
    let pki = TestPki::generate();
    let tls = pki.server(true);
    let main = RedisServer::start_tls(&tls, &[]).expect("TLS main");
    let nodes: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_tls(&tls, &[]).expect("TLS RedLock node"))
        .collect();
    let config = Config {
        redlock_nodes: nodes.iter().map(RedisServer::url).collect(),
        ..test_config(&main)
    };
    let app = spawn_app(pki.trusted_by(config, true)).await;
    // A node's first call opens its TLS connection inside the per-node
    // bound (at most 100 ms), which a loaded machine can exceed: that call
    // answers 503 ("try again"). Warm the connections first.
    let warmed = eventually(Duration::from_secs(10), || async {
        let acquired = app
            .post("/redlocks/tls-warm/acquire", json!({"holder": "w"}))
            .await;
        acquired.status() == 201
    })
    .await;
    assert!(warmed, "a RedLock over TLS nodes is granted within 10 s");
    let grant = hand_over(&app, "/redlocks/tls-redlock", "acquire").await;
    assert_eq!(
        grant["nodes"],
        json!({"acquired": 3, "total": 3}),
        "{grant}"
    );
}

#[test]
fn a_key_that_does_not_fit_the_client_certificate_stops_the_start() {
    let pki = TestPki::generate();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_latchkey"))
        .env("LATCHKEY_REDIS_URL", "rediss://127.0.0.1:1")
        .env("LATCHKEY_REDIS_TLS_CA_FILE", pki.path("ca.pem"))
        .env("LATCHKEY_REDIS_TLS_CERT_FILE", pki.path("client.pem"))
        .env("LATCHKEY_REDIS_TLS_KEY_FILE", pki.path("server.key"))
        .output()
        .expect("binary runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("LATCHKEY_REDIS_TLS_KEY_FILE")
            && stderr.contains("does not fit LATCHKEY_REDIS_TLS_CERT_FILE"),
        "{stderr}"
    );
}
