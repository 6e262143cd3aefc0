//! latchkey as a Redis ACL user with exactly the minimum ACL that the
//! book's "Redis over TLS and with ACL users" (docs/src/tls-acl.md)
//! documents: the users are made from the book's own `ACL SETUSER` lines, every primitive is
//! driven through them (waits and wake-ups included), and Redis's
//! `ACL LOG` must then show no refusal but the optional `CONFIG GET`. A
//! command the documented ACL lacks fails these tests.

use std::collections::HashMap;
use std::time::Duration;

use latchkey::config::RedisMode;
use latchkey::devredis::{RedisCluster, RedisServer};
use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::*;

const DOC: &str = include_str!("../../docs/src/tls-acl.md");

/// The rules of the book's `ACL SETUSER` line under the comment that
/// starts with `# {comment}`.
fn documented(comment: &str) -> Vec<String> {
    let heading = format!("# {comment}");
    let mut lines = DOC.lines().skip_while(|l| !l.starts_with(&heading));
    lines
        .next()
        .unwrap_or_else(|| panic!("docs/src/tls-acl.md has no ACL comment {heading:?}"));
    let line = lines.next().unwrap_or_default();
    let rules = line
        .strip_prefix("ACL SETUSER ")
        .unwrap_or_else(|| panic!("an ACL SETUSER line under {heading:?}, got {line:?}"));
    rules.split_whitespace().map(str::to_string).collect()
}

/// The ACL every deployment needs.
fn everywhere() -> Vec<String> {
    documented("Every deployment")
}

/// Runs `ACL SETUSER` with each set of rules on `server`.
async fn set_user(server: &RedisServer, rules: &[Vec<String>]) {
    let mut conn = redis_conn(server).await;
    for rule in rules {
        let () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(rule)
            .query_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("ACL SETUSER {rule:?}: {e}"));
    }
}

/// `url` with the ACL user and its password.
fn as_user(url: &str) -> String {
    url.replacen("://", "://latchkey:secret@", 1)
}

/// Every refusal in `server`'s `ACL LOG`, as `<reason> <object> by <user>`
/// (`command config|get by latchkey`).
async fn refusals(server: &RedisServer) -> Vec<String> {
    let entries: Vec<HashMap<String, redis::Value>> = redis::cmd("ACL")
        .arg("LOG")
        .query_async(&mut redis_conn(server).await)
        .await
        .expect("ACL LOG");
    let text = |entry: &HashMap<String, redis::Value>, field: &str| match entry.get(field) {
        Some(redis::Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        other => format!("{other:?}"),
    };
    entries
        .iter()
        .map(|e| {
            let (reason, object) = (text(e, "reason"), text(e, "object"));
            format!("{reason} {object} by {}", text(e, "username"))
        })
        .collect()
}

/// Nothing was refused on `server` but the optional `CONFIG GET`.
async fn assert_nothing_refused(server: &RedisServer) {
    let refused = refusals(server).await;
    assert!(
        refused
            .iter()
            .all(|r| r == "command config|get by latchkey"),
        "refused on :{}: {refused:?}",
        server.port()
    );
}

/// Redis checks each command a script calls against the user: every one
/// of them must be in the ACL, including those of branches the tests
/// below may not reach (`redis.call` and `redis.pcall` alike: a refusal
/// that a `pcall` caught would be an error the script did not expect).
/// `PUBLISH` in a script stands for `PUBLISH` everywhere and for
/// `SPUBLISH` on a Redis Cluster.
#[test]
fn the_documented_acl_has_every_command_the_scripts_call() {
    let allowed = everywhere();
    let on_cluster: Vec<String> = allowed
        .iter()
        .cloned()
        .chain(documented("Redis Cluster"))
        .collect();
    for script in latchkey::store::scripts::ALL.iter() {
        let body = script.body().replace("redis.pcall(", "redis.call(");
        for call in body.split("redis.call(").skip(1) {
            if call.starts_with("PUBLISH,") {
                assert!(allowed.contains(&"+publish".to_string()), "+publish");
                assert!(on_cluster.contains(&"+spublish".to_string()), "+spublish");
                continue;
            }
            let command = call
                .split(['\'', '"'])
                .nth(1)
                .unwrap_or_else(|| panic!("{}: redis.call({call:.20}", script.name()));
            let rule = format!("+{}", command.to_lowercase());
            assert!(
                allowed.contains(&rule),
                "{} calls {command}: {rule} is missing from the book's ACL",
                script.name()
            );
        }
    }
}

#[tokio::test]
async fn the_documented_acl_serves_every_primitive_and_the_redlock_nodes() {
    let main = redis();
    let nodes: Vec<RedisServer> = (0..3).map(|_| redis()).collect();
    for server in std::iter::once(&main).chain(&nodes) {
        set_user(server, &[everywhere()]).await;
    }
    let app = spawn_app(Config {
        redlock_nodes: nodes.iter().map(|node| as_user(&node.url())).collect(),
        // Short, so that a queue entry lapses within the test.
        queue_grace_ms: 100,
        ..test_config_for(vec![as_user(&main.url())])
    })
    .await;
    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::OK);

    hand_over(&app, "/locks/acl-lock", "acquire").await;
    hand_over(&app, "/fair-locks/acl-fair", "acquire").await;
    hand_over(&app, "/rwlocks/acl-rw", "write/acquire").await;
    for reader in ["r1", "r2"] {
        let read = app
            .post("/rwlocks/acl-rw/read/acquire", json!({"holder": reader}))
            .await;
        assert_eq!(read.status(), StatusCode::CREATED, "{reader}");
    }
    for reader in ["r1", "r2"] {
        let hold = format!("/rwlocks/acl-rw/holders/{reader}");
        assert_eq!(app.delete_json(&hold).await["hold_count"], 0, "{reader}");
    }
    let configured = app
        .client
        .put(app.url("/semaphores/acl-sem"))
        .json(&json!({"permits": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(configured.status(), StatusCode::OK);
    hand_over(&app, "/semaphores/acl-sem", "acquire").await;
    assert_eq!(
        app.delete_json("/semaphores/acl-sem").await["deleted"],
        true
    );
    let grant = hand_over(&app, "/redlocks/acl-red", "acquire").await;
    assert_eq!(
        grant["nodes"],
        json!({"acquired": 3, "total": 3}),
        "{grant}"
    );

    // A re-entry, a partial release, and a force unlock.
    for count in [1, 2] {
        let grant = app.must_acquire("acl-again", json!({"holder": "a"})).await;
        assert_eq!(grant["hold_count"], count);
    }
    assert_eq!(app.release("acl-again", "a").await.status(), StatusCode::OK);
    assert_eq!(app.state("acl-again").await["hold_count"], 1);
    assert_eq!(app.delete_json("/locks/acl-again").await["released"], true);

    // A fair-lock waiter that stops polling (b) loses its place after the
    // grace, and its queue entry is dropped while another waiter (d) keeps
    // the queue alive.
    let fair = "/fair-locks/acl-queue/acquire";
    assert_eq!(app.post(fair, json!({"holder": "a"})).await.status(), 201);
    assert_eq!(app.post(fair, json!({"holder": "b"})).await.status(), 409);
    let waiter = app.spawn_post(fair, json!({"holder": "d", "wait_ms": 5000}));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let problem = assert_problem(
        app.post(fair, json!({"holder": "c"})).await,
        409,
        "lock-held",
    )
    .await;
    assert_eq!(problem["position"], 1, "only d is ahead of c: {problem}");
    let released = app.delete_json("/fair-locks/acl-queue/holders/a").await;
    assert_eq!(released["released"], true);
    assert_eq!(waiter.await.unwrap().status(), StatusCode::CREATED);
    let released = app.delete_json("/fair-locks/acl-queue/holders/d").await;
    assert_eq!(released["released"], true);

    // A latch: a waiter released by the count-down that opens it (one
    // count-down with an idempotency key, which has its own record).
    let set = app
        .client
        .put(app.url("/latches/acl-latch"))
        .json(&json!({"count": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(set.status(), StatusCode::CREATED);
    let waiter = {
        let wait = app
            .client
            .get(app.url("/latches/acl-latch/wait?wait_ms=10000"));
        tokio::spawn(async move { wait.send().await.expect("sent") })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    for key in ["k1", "k2"] {
        let counted = app
            .client
            .post(app.url("/latches/acl-latch/count-down"))
            .header("Idempotency-Key", key)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(counted.status(), StatusCode::OK, "{key}");
    }
    let opened = waiter.await.unwrap();
    assert_eq!(opened.status(), StatusCode::OK);
    let opened: serde_json::Value = opened.json().await.unwrap();
    assert_eq!(opened["open"], true, "{opened}");

    // A multi-lock: a waiting set woken by the release of an overlapping
    // one, its heartbeat and release.
    let first = json!({"names": ["acl-m1", "acl-m2"], "holder": "a"});
    let second = json!({"names": ["acl-m2", "acl-m3"], "holder": "b"});
    let acquired = app.post("/multilocks/acquire", first.clone()).await;
    assert_eq!(acquired.status(), StatusCode::CREATED);
    let mut waiting = second.clone();
    waiting["wait_ms"] = json!(10000);
    let waiter = app.spawn_post("/multilocks/acquire", waiting);
    app.wait_for_waiters("acl-m2", 1).await;
    let released = app.post("/multilocks/release", first).await;
    assert_eq!(released.status(), StatusCode::OK);
    assert_eq!(waiter.await.unwrap().status(), StatusCode::CREATED);
    let heartbeat = app.post("/multilocks/heartbeat", second.clone()).await;
    assert_eq!(heartbeat.status(), StatusCode::OK);
    let released = app.post("/multilocks/release", second).await;
    assert_eq!(released.status(), StatusCode::OK);

    // The subscriber's keep-alive PING (every 5 s) runs as the user too
    // (it is the one connection that sends PING).
    let conn = redis_conn(&main).await;
    let pinged = eventually(Duration::from_secs(8), || {
        let mut conn = conn.clone();
        async move {
            let clients: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(&mut conn)
                .await
                .unwrap_or_default();
            clients
                .lines()
                .any(|c| c.contains("user=latchkey") && c.contains("cmd=ping"))
        }
    })
    .await;
    assert!(pinged, "the subscriber sends PING");
    // Listings SCAN the main Redis and the RedLock nodes.
    for kind in ["locks", "semaphores", "redlocks", "sessions"] {
        let listed = app
            .client
            .get(app.url(&format!("/{kind}")))
            .send()
            .await
            .unwrap();
        assert_eq!(listed.status(), StatusCode::OK, "GET /{kind}");
    }
    assert!(
        app.metrics()
            .await
            .contains("latchkey_pubsub_reconnects_total 0")
    );

    for server in std::iter::once(&main).chain(&nodes) {
        assert_nothing_refused(server).await;
    }
}

/// The ACL of earlier versions allowed `PSUBSCRIBE` and not `SUBSCRIBE`
/// (their subscriber held one pattern for every channel). A deployment
/// upgraded without changing its ACL must still wake its waiters: the hub
/// falls back to the pattern.
#[tokio::test]
async fn an_acl_of_earlier_versions_without_subscribe_still_wakes_waiters() {
    let main = redis();
    let mut earlier: Vec<String> = everywhere()
        .into_iter()
        .filter(|rule| rule != "+subscribe" && rule != "+unsubscribe")
        .collect();
    earlier.push("+psubscribe".into());
    set_user(&main, &[earlier]).await;
    let app = spawn_app(test_config_for(vec![as_user(&main.url())])).await;
    let waiter = app
        .held_with_waiter("earlier-acl", ("a", 30000), ("b", 20000))
        .await;
    let conn = redis_conn(&main).await;
    let by_pattern = eventually(Duration::from_secs(5), || {
        let mut conn = conn.clone();
        async move {
            let patterns: i64 = redis::cmd("PUBSUB")
                .arg("NUMPAT")
                .query_async(&mut conn)
                .await
                .unwrap();
            patterns == 1
        }
    })
    .await;
    assert!(by_pattern, "the hub never fell back to the pattern");
    // Woken by the release's message, long before the 30 s lease ends.
    let released = std::time::Instant::now();
    app.release("earlier-acl", "a").await;
    assert_eq!(waiter.await.unwrap().status(), StatusCode::CREATED);
    assert!(released.elapsed() < Duration::from_secs(2));
    let refused = refusals(&main).await;
    assert!(
        refused
            .iter()
            .all(|r| r == "command subscribe by latchkey" || r == "command config|get by latchkey"),
        "{refused:?}"
    );
}

/// The ACL of earlier versions allowed `EVALSHA` and `SCRIPT LOAD`, not
/// functions. A deployment upgraded without changing its ACL still
/// serves: the store runs the scripts by `EVALSHA`, after one refused
/// `FUNCTION LIST` at start, and loads them again when Redis lost them
/// (`SCRIPT FLUSH`).
#[tokio::test]
async fn an_acl_of_earlier_versions_without_functions_runs_the_scripts() {
    let main = redis();
    let earlier: Vec<String> = everywhere()
        .into_iter()
        .filter(|rule| rule != "+fcall" && !rule.starts_with("+function|"))
        .collect();
    assert!(earlier.len() < everywhere().len());
    set_user(&main, &[earlier]).await;
    let app = spawn_app(test_config_for(vec![as_user(&main.url())])).await;
    let waiter = app
        .held_with_waiter("earlier-scripts", ("a", 30000), ("b", 20000))
        .await;
    let flushed: String = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut redis_conn(&main).await)
        .await
        .unwrap();
    assert_eq!(flushed, "OK");
    assert_eq!(app.release("earlier-scripts", "a").await.status(), 200);
    assert_eq!(waiter.await.unwrap().status(), StatusCode::CREATED);
    let granted = app
        .must_acquire("earlier-scripts-2", json!({"holder": "c"}))
        .await;
    assert_eq!(granted["fencing_token"], 1, "{granted}");
    let refused = refusals(&main).await;
    assert!(!refused.is_empty());
    assert!(
        refused.iter().all(|r| r.starts_with("command function|")
            || r == "command fcall by latchkey"
            || r == "command config|get by latchkey"),
        "{refused:?}"
    );
    let mut conn = redis_conn(&main).await;
    assert!(command_calls(&mut conn, "evalsha").await > 0);
    assert_eq!(command_calls(&mut conn, "fcall").await, 0);
}

/// A wrong password, or a user the Sentinels refuse, is refused while
/// connecting: the 503 says so instead of "cannot be reached".
#[tokio::test]
async fn refused_credentials_answer_503_naming_them() {
    let redis = redis();
    let sentinel = RedisServer::start_sentinel("refusing", redis.port(), None).expect("sentinel");
    set_user(&redis, &[everywhere()]).await;
    set_user(
        &sentinel,
        &[vec!["latchkey".into(), "on".into(), ">secret".into()]],
    )
    .await;
    let wrong_password =
        test_config_for(vec![redis.url().replacen("://", "://latchkey:wrong@", 1)]);
    let no_lookup = Config {
        redis_mode: RedisMode::Sentinel,
        sentinel_master: "refusing".into(),
        ..test_config_for(vec![as_user(&sentinel.url())])
    };
    for config in [wrong_password, no_lookup] {
        let app = spawn_app_unready(config).await;
        let response = app.acquire("refused", json!({"holder": "a"})).await;
        let problem = assert_problem(response, 503, "backend-unavailable").await;
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains("rejected the service's credentials or permissions")),
            "{problem}"
        );
    }
}

#[tokio::test]
async fn the_documented_acl_serves_sentinel_mode_with_min_replicas() {
    let master = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]).expect("master");
    let port = master.port().to_string();
    let _replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]).expect("replica");
    let sentinel = RedisServer::start_sentinel("aclmaster", master.port(), None).expect("sentinel");
    let on_master = [
        everywhere(),
        documented("With LATCHKEY_MIN_REPLICAS"),
        documented("Sentinel mode, on the master"),
    ];
    set_user(&master, &on_master).await;
    set_user(&sentinel, &[documented("Sentinel mode, on every Sentinel")]).await;
    assert!(replica_in_sync(&master).await, "the replica syncs");

    let app = spawn_app(Config {
        redis_mode: RedisMode::Sentinel,
        sentinel_master: "aclmaster".into(),
        min_replicas: 1,
        // WAIT gets half the response timeout; leave room for a loaded CI.
        redis_response_timeout_ms: 4000,
        ..test_config_for(vec![as_user(&sentinel.url())])
    })
    .await;
    hand_over(&app, "/locks/acl-sentinel", "acquire").await;
    hand_over(&app, "/fair-locks/acl-sentinel", "acquire").await;

    assert_nothing_refused(&master).await;
    assert_nothing_refused(&sentinel).await;
}

#[tokio::test]
async fn the_documented_acl_serves_redis_cluster() {
    let cluster = RedisCluster::start(3).expect("cluster starts");
    for node in &cluster.nodes {
        set_user(node, &[everywhere(), documented("Redis Cluster")]).await;
    }
    let app = spawn_app(Config {
        redis_mode: RedisMode::Cluster,
        ..test_config_for(cluster.urls().iter().map(|u| as_user(u)).collect())
    })
    .await;
    // Names in slots of different masters.
    for i in 0..4 {
        hand_over(&app, &format!("/locks/acl-cluster-{i}"), "acquire").await;
    }
    // A listing asks for the masters (CLUSTER SLOTS) and SCANs each.
    let listed = app.client.get(app.url("/locks")).send().await.unwrap();
    assert_eq!(listed.status(), StatusCode::OK);
    for node in &cluster.nodes {
        assert_nothing_refused(node).await;
    }
}
