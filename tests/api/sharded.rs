//! Sharded pub/sub on Redis Cluster: scripts `SPUBLISH`, and each
//! instance `SSUBSCRIBE`s exactly the channels its waiters wait on, on the
//! shard that owns each channel's slot (the book: "What the guarantees
//! are"). Real clusters: three masters, and three masters with a replica
//! each for a failover.

use std::future::Future;
use std::time::{Duration, Instant};

use latchkey::config::RedisMode;
use latchkey::devredis::{RedisCluster, RedisServer};
use reqwest::Response;
use serde_json::json;
use tokio::task::JoinHandle;

use crate::helpers::*;

/// One command's answer on `node`.
pub(crate) async fn ask<T: redis::FromRedisValue>(node: &RedisServer, args: &[&str]) -> T {
    let (name, rest) = args.split_first().expect("a command");
    redis::cmd(name)
        .arg(rest)
        .query_async(&mut redis_conn(node).await)
        .await
        .unwrap_or_else(|e| panic!("{args:?} on :{}: {e}", node.port()))
}

/// The index of the node that serves `key`'s slot as master, by the
/// cluster's own view (asked of `via`, a live node).
pub(crate) async fn owner(cluster: &RedisCluster, via: usize, key: &str) -> usize {
    owner_seen_by(cluster, via, key)
        .await
        .unwrap_or_else(|| panic!("no master serves {key}'s slot"))
}

/// [`owner`], or `None` while `via` knows no master for the slot (as a
/// node may for a moment during a failover).
pub(crate) async fn owner_seen_by(cluster: &RedisCluster, via: usize, key: &str) -> Option<usize> {
    let slot: i64 = ask(&cluster.nodes[via], &["CLUSTER", "KEYSLOT", key]).await;
    let ranges: Vec<redis::Value> = ask(&cluster.nodes[via], &["CLUSTER", "SLOTS"]).await;
    for range in ranges {
        let redis::Value::Array(range) = range else {
            continue;
        };
        let (start, end, port): (i64, i64, i64) = match range.as_slice() {
            [
                redis::Value::Int(s),
                redis::Value::Int(e),
                redis::Value::Array(master),
                ..,
            ] => match master.as_slice() {
                [_, redis::Value::Int(port), ..] => (*s, *e, *port),
                _ => continue,
            },
            _ => continue,
        };
        if (start..=end).contains(&slot) {
            let node = cluster
                .nodes
                .iter()
                .position(|n| i64::from(n.port()) == port)
                .expect("a node of ours");
            return Some(node);
        }
    }
    None
}

/// The shard channels under `pattern` with subscribers on `node`.
async fn shard_channels(node: &RedisServer, pattern: &str) -> Vec<String> {
    ask(node, &["PUBSUB", "SHARDCHANNELS", pattern]).await
}

/// `PUBSUB SHARDNUMSUB channel` on `node` (the node must serve its slot).
async fn shard_subscribers(node: &RedisServer, channel: &str) -> i64 {
    let reply: (String, i64) = ask(node, &["PUBSUB", "SHARDNUMSUB", channel]).await;
    reply.1
}

/// The one channel of object `name` that has shard subscribers on `node`,
/// once it has one (within 5 s).
async fn subscribed_channel(node: &RedisServer, name: &str) -> String {
    let pattern = format!("*{{{name}}}:*");
    let started = Instant::now();
    loop {
        let channels = shard_channels(node, &pattern).await;
        if let [channel] = channels.as_slice() {
            return channel.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no shard subscription for {name} on :{} (found {channels:?})",
            node.port()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// While `waiter` (on the second instance) waits on `name`, its channel is
/// shard-subscribed once, on the master that owns it, and nowhere else;
/// `release` (on the first instance) then wakes it within a second; once
/// it is gone the channel is unsubscribed.
async fn woken_through_its_shard<F: Future<Output = u16>>(
    cluster: &RedisCluster,
    name: &str,
    waiter: JoinHandle<Response>,
    release: F,
) {
    let owner = owner(cluster, 0, name).await;
    let channel = subscribed_channel(&cluster.nodes[owner], name).await;
    assert_eq!(
        shard_subscribers(&cluster.nodes[owner], &channel).await,
        1,
        "{channel}: one instance subscribed"
    );
    for (i, node) in cluster
        .nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != owner)
    {
        let elsewhere = shard_channels(node, &format!("*{{{name}}}:*")).await;
        assert!(elsewhere.is_empty(), "{channel} also on node {i}");
    }
    let released = Instant::now();
    assert_eq!(release.await, 200, "{name}: released");
    let response = waiter.await.unwrap();
    let woken = released.elapsed();
    assert!(
        response.status().is_success(),
        "{name}: {}",
        response.status()
    );
    assert!(
        woken < Duration::from_secs(1),
        "{name}: woken {woken:?} after the release"
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            shard_subscribers(&cluster.nodes[owner], &channel).await == 0
        })
        .await,
        "{channel} is unsubscribed once nobody waits on it"
    );
}

pub(crate) fn cluster_config(cluster: &RedisCluster) -> Config {
    Config {
        redis_mode: RedisMode::Cluster,
        ..test_config_for(cluster.urls())
    }
}

/// One sample of a Prometheus metric without labels.
/// DELETE `path`; its status.
async fn deleted(app: &TestApp, path: &str) -> u16 {
    let response = app.client.delete(app.url(path)).send().await.unwrap();
    response.status().as_u16()
}

/// `GET path` in the background (a latch wait).
fn spawn_get(app: &TestApp, path: &str) -> JoinHandle<Response> {
    let request = app.client.get(app.url(path));
    tokio::spawn(async move { request.send().await.expect("sent") })
}

#[tokio::test]
async fn waiters_on_a_cluster_are_woken_through_their_shard_only() {
    let cluster = RedisCluster::start(3).expect("cluster starts");
    let a = spawn_app(cluster_config(&cluster)).await;
    let b = spawn_app(cluster_config(&cluster)).await;

    // A lock.
    a.must_acquire("sh-lock", json!({"holder": "x", "lease_ms": 30000}))
        .await;
    let waiter = b.spawn_post(
        "/locks/sh-lock/acquire",
        json!({"holder": "y", "wait_ms": 20000}),
    );
    let release = async { a.release("sh-lock", "x").await.status().as_u16() };
    woken_through_its_shard(&cluster, "sh-lock", waiter, release).await;

    // A fair lock (its queue's notes carry tickets).
    let taken = a
        .post("/fair-locks/sh-fair/acquire", json!({"holder": "x"}))
        .await;
    assert_eq!(taken.status(), 201);
    let waiter = b.spawn_post(
        "/fair-locks/sh-fair/acquire",
        json!({"holder": "y", "wait_ms": 20000}),
    );
    let release = deleted(&a, "/fair-locks/sh-fair/holders/x");
    woken_through_its_shard(&cluster, "sh-fair", waiter, release).await;

    // A semaphore.
    let configured = a
        .client
        .put(a.url("/semaphores/sh-sem"))
        .json(&json!({"permits": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(configured.status(), 200);
    let taken = a
        .post("/semaphores/sh-sem/acquire", json!({"holder": "x"}))
        .await;
    assert_eq!(taken.status(), 201);
    let waiter = b.spawn_post(
        "/semaphores/sh-sem/acquire",
        json!({"holder": "y", "wait_ms": 20000}),
    );
    let release = deleted(&a, "/semaphores/sh-sem/holders/x");
    woken_through_its_shard(&cluster, "sh-sem", waiter, release).await;

    // A latch (broadcast waiters: they answer from the message).
    let set = a
        .client
        .put(a.url("/latches/sh-latch"))
        .json(&json!({"count": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(set.status(), 201);
    let waiter = spawn_get(&b, "/latches/sh-latch/wait?wait_ms=20000");
    let release = async {
        a.post("/latches/sh-latch/count-down", json!({}))
            .await
            .status()
            .as_u16()
    };
    woken_through_its_shard(&cluster, "sh-latch", waiter, release).await;

    // No pattern subscription and no broadcast PUBLISH anywhere; the
    // scripts' messages went out by SPUBLISH.
    let mut sharded = 0;
    for node in &cluster.nodes {
        let patterns: i64 = ask(node, &["PUBSUB", "NUMPAT"]).await;
        assert_eq!(patterns, 0, "pattern subscriptions on :{}", node.port());
        let stats: String = ask(node, &["INFO", "commandstats"]).await;
        for classic in ["cmdstat_psubscribe:", "cmdstat_publish:"] {
            assert!(
                !stats.contains(classic),
                ":{} ran {classic}\n{stats}",
                node.port()
            );
        }
        sharded += i32::from(stats.contains("cmdstat_spublish:"));
        let clients: String = ask(node, &["CLIENT", "LIST"]).await;
        assert!(
            !clients.contains("cmd=psubscribe"),
            ":{}: {clients}",
            node.port()
        );
    }
    assert!(sharded > 0, "the scripts published by SPUBLISH");
    assert!(b.metric("latchkey_pubsub_messages_total").await >= 4.0);
    assert_eq!(b.metric("latchkey_pubsub_connected").await, 1.0);
    assert_eq!(b.metric("latchkey_pubsub_reconnects_total").await, 0.0);
}

/// The node that replicates the master at `master` (by `CLUSTER NODES`).
pub(crate) async fn replica_of(cluster: &RedisCluster, master: usize) -> usize {
    let nodes: String = ask(&cluster.nodes[master], &["CLUSTER", "NODES"]).await;
    let id = nodes
        .lines()
        .find(|line| line.contains("myself"))
        .and_then(|line| line.split_whitespace().next())
        .expect("its own line")
        .to_string();
    let replica = nodes
        .lines()
        .find(|line| line.split_whitespace().nth(3) == Some(id.as_str()))
        .unwrap_or_else(|| panic!("no replica of {id}:\n{nodes}"));
    let port: u16 = replica
        .split_whitespace()
        .nth(1)
        .and_then(|addr| addr.split(['@', ',']).next())
        .and_then(|addr| addr.rsplit(':').next())
        .and_then(|port| port.parse().ok())
        .expect("ip:port@bus");
    cluster
        .nodes
        .iter()
        .position(|n| n.port() == port)
        .expect("a node of ours")
}

/// Retries `call` (through latchkey, which answers 503 while the cluster
/// fails over) until it answers 200, for up to 10 s.
async fn until_ok<F, Fut>(what: &str, mut call: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = u16>,
{
    let started = Instant::now();
    loop {
        let status = call().await;
        if status == 200 {
            return;
        }
        assert!(
            status == 503 && started.elapsed() < Duration::from_secs(10),
            "{what}: {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn parked_waiters_are_woken_after_their_shard_fails_over() {
    let started = Instant::now();
    let mut cluster = RedisCluster::start_with_replicas(3).expect("cluster starts");
    let a = spawn_app(cluster_config(&cluster)).await;
    let b = spawn_app(cluster_config(&cluster)).await;

    // A lock and a latch whose slots the same master serves.
    let m = owner(&cluster, 0, "fo-lock").await;
    let mut latch = None;
    for i in 0..200 {
        let name = format!("fo-latch-{i}");
        if owner(&cluster, 0, &name).await == m {
            latch = Some(name);
            break;
        }
    }
    let latch = latch.expect("a latch name on the same master");
    let r = replica_of(&cluster, m).await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            let info: String = ask(&cluster.nodes[r], &["INFO", "replication"]).await;
            info.contains("master_link_status:up")
        })
        .await,
        "the replica follows its master"
    );

    a.must_acquire("fo-lock", json!({"holder": "x", "lease_ms": 60000}))
        .await;
    let set = a
        .client
        .put(a.url(&format!("/latches/{latch}")))
        .json(&json!({"count": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(set.status(), 201);
    // The replica has both before its master dies.
    let acked: i64 = ask(&cluster.nodes[m], &["WAIT", "1", "2000"]).await;
    assert_eq!(acked, 1, "the replica acknowledged the writes");

    let parked = Instant::now();
    let lock_waiter = b.spawn_post(
        "/locks/fo-lock/acquire",
        json!({"holder": "y", "wait_ms": 15000}),
    );
    let latch_waiter = spawn_get(&b, &format!("/latches/{latch}/wait?wait_ms=15000"));
    let lock_channel = subscribed_channel(&cluster.nodes[m], "fo-lock").await;
    subscribed_channel(&cluster.nodes[m], &latch).await;

    cluster.nodes[m].stop();
    assert!(
        eventually(Duration::from_secs(15), || async {
            let role: Vec<redis::Value> = ask(&cluster.nodes[r], &["ROLE"]).await;
            matches!(role.first(), Some(redis::Value::BulkString(b)) if b == b"master")
        })
        .await,
        "the replica takes over"
    );
    // The instance subscribes there again by itself.
    assert!(
        eventually(Duration::from_secs(5), || async {
            shard_subscribers(&cluster.nodes[r], &lock_channel).await == 1
        })
        .await,
        "{lock_channel} is subscribed on the promoted replica"
    );
    assert!(
        !lock_waiter.is_finished() && !latch_waiter.is_finished(),
        "the waiters are still parked"
    );
    assert!(b.metric("latchkey_pubsub_reconnects_total").await >= 1.0);
    assert!(
        eventually(Duration::from_secs(5), || async {
            b.metric("latchkey_pubsub_connected").await == 1.0
        })
        .await,
        "the subscriber counts itself connected again"
    );

    until_ok("release", || async {
        a.release("fo-lock", "x").await.status().as_u16()
    })
    .await;
    let released = Instant::now();
    until_ok("count-down", || async {
        let path = format!("/latches/{latch}/count-down");
        a.post(&path, json!({})).await.status().as_u16()
    })
    .await;
    let lock = lock_waiter.await.unwrap();
    assert_eq!(lock.status(), 201, "the parked lock waiter is granted");
    let latch = latch_waiter.await.unwrap();
    assert_eq!(latch.status(), 200, "the parked latch waiter sees it open");
    let woken = released.elapsed();
    assert!(
        woken < Duration::from_secs(2),
        "woken {woken:?} after the release"
    );
    assert!(
        parked.elapsed() < Duration::from_secs(12),
        "well before the waits' end: {:?}",
        parked.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

/// Moves `slot` with its keys from node `from` to node `to`, as a
/// resharding does (`CLUSTER SETSLOT … IMPORTING/MIGRATING`, `MIGRATE`,
/// `CLUSTER SETSLOT … NODE` on every master).
async fn move_slot(cluster: &RedisCluster, slot: i64, from: usize, to: usize) {
    let slot = slot.to_string();
    let (source, target) = (&cluster.nodes[from], &cluster.nodes[to]);
    let source_id: String = ask(source, &["CLUSTER", "MYID"]).await;
    let target_id: String = ask(target, &["CLUSTER", "MYID"]).await;
    let () = ask(
        target,
        &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id],
    )
    .await;
    let () = ask(
        source,
        &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id],
    )
    .await;
    let keys: Vec<String> = ask(source, &["CLUSTER", "GETKEYSINSLOT", &slot, "100"]).await;
    if !keys.is_empty() {
        let port = target.port().to_string();
        let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        migrate.extend(keys.iter().map(String::as_str));
        let () = ask(source, &migrate).await;
    }
    let others = (cluster.nodes.iter().enumerate())
        .filter(|(i, _)| ![from, to].contains(i))
        .map(|(_, node)| node);
    for node in [target, source].into_iter().chain(others) {
        let () = ask(node, &["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]).await;
    }
}

#[tokio::test]
async fn parked_waiters_follow_their_slot_to_another_master() {
    let cluster = RedisCluster::start(3).expect("cluster starts");
    let a = spawn_app(cluster_config(&cluster)).await;
    let b = spawn_app(cluster_config(&cluster)).await;
    let from = owner(&cluster, 0, "mv-lock").await;
    let to = (from + 1) % cluster.nodes.len();
    let slot: i64 = ask(&cluster.nodes[0], &["CLUSTER", "KEYSLOT", "mv-lock"]).await;

    a.must_acquire("mv-lock", json!({"holder": "x", "lease_ms": 60000}))
        .await;
    let parked = Instant::now();
    let waiter = b.spawn_post(
        "/locks/mv-lock/acquire",
        json!({"holder": "y", "wait_ms": 15000}),
    );
    let channel = subscribed_channel(&cluster.nodes[from], "mv-lock").await;

    move_slot(&cluster, slot, from, to).await;
    assert_eq!(owner(&cluster, to, "mv-lock").await, to, "the slot moved");
    // The old owner dropped the subscription with the slot; the instance
    // subscribes again where the slot went.
    let mut seen = Vec::new();
    let started = Instant::now();
    while seen.last() != Some(&1) && started.elapsed() < Duration::from_secs(5) {
        seen.push(shard_subscribers(&cluster.nodes[to], &channel).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    seen.dedup();
    assert_eq!(
        seen.last(),
        Some(&1),
        "{channel} is subscribed once on the new owner; subscribers seen: {seen:?}, on the \
         old owner now: {:?}",
        shard_channels(&cluster.nodes[from], "*").await
    );
    assert!(!waiter.is_finished(), "still parked");

    until_ok("release", || async {
        a.release("mv-lock", "x").await.status().as_u16()
    })
    .await;
    let released = Instant::now();
    let response = waiter.await.unwrap();
    assert_eq!(response.status(), 201, "the parked waiter is granted");
    let woken = released.elapsed();
    assert!(
        woken < Duration::from_secs(2),
        "woken {woken:?} after the release"
    );
    assert!(
        parked.elapsed() < Duration::from_secs(12),
        "{:?}",
        parked.elapsed()
    );
}
