//! Listings (`GET /{kind}`, `GET /sessions`) and `GET /whoami`: every
//! kind, prefixes, paging, namespaces, bad queries, and a real Cluster
//! whose objects come and go during a listing.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use latchkey::config::RedisMode;
use latchkey::devredis::{RedisCluster, RedisServer};
use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::*;

const A_CLIENT: &str = "listing-key-team-a-client-0123";
const A_ADMIN: &str = "listing-key-team-a-admin-01234";
const B_ADMIN: &str = "listing-key-team-b-admin-01234";

fn keyed(config: Config) -> Config {
    Config {
        api_keys: vec![
            key_entry("team-a", "client", A_CLIENT),
            key_entry("team-a", "admin", A_ADMIN),
            key_entry("team-b", "admin", B_ADMIN),
        ],
        ..config
    }
}

/// `method path` with `key` (none: no Authorization) and `body`; the
/// status and the JSON body.
async fn call(
    app: &TestApp,
    key: Option<&str>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = app.client.request(method, app.url(path));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request sent");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn ok(app: &TestApp, key: Option<&str>, method: Method, path: &str, body: Value) -> Value {
    let (status, got) = call(app, key, method.clone(), path, Some(body)).await;
    assert!(
        (200..300).contains(&status),
        "{method} {path}: {status} {got}"
    );
    got
}

/// Every page of `GET path` (a query string may follow), following
/// cursors: the names listed, in order, with repeats.
async fn list_all(app: &TestApp, key: Option<&str>, path: &str) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    let sep = if path.contains('?') { '&' } else { '?' };
    for _ in 0..10_000 {
        let url = match &cursor {
            Some(c) => format!("{path}{sep}cursor={c}"),
            None => path.to_string(),
        };
        let (status, page) = call(app, key, Method::GET, &url, None).await;
        assert_eq!(status, 200, "{url}: {page}");
        items.extend(page["items"].as_array().expect("items").iter().cloned());
        match &page["cursor"] {
            Value::Null => return items,
            Value::String(c) => cursor = Some(c.clone()),
            other => panic!("cursor {other}"),
        }
    }
    panic!("the listing of {path} never ended")
}

fn names(items: &[Value]) -> BTreeSet<String> {
    items
        .iter()
        .map(|i| i["name"].as_str().expect("a name").to_string())
        .collect()
}

/// One object of each kind named `name` (RedLock too when `redlocks`).
async fn create_each(app: &TestApp, key: Option<&str>, name: &str, redlocks: bool) {
    let post = Method::POST;
    let put = Method::PUT;
    ok(
        app,
        key,
        post.clone(),
        &format!("/locks/{name}/acquire"),
        json!({}),
    )
    .await;
    ok(
        app,
        key,
        post.clone(),
        &format!("/fair-locks/{name}/acquire"),
        json!({}),
    )
    .await;
    ok(
        app,
        key,
        post.clone(),
        &format!("/rwlocks/{name}/read/acquire"),
        json!({}),
    )
    .await;
    ok(
        app,
        key,
        put.clone(),
        &format!("/semaphores/{name}"),
        json!({"permits": 3}),
    )
    .await;
    ok(
        app,
        key,
        put.clone(),
        &format!("/latches/{name}"),
        json!({"count": 2}),
    )
    .await;
    ok(
        app,
        key,
        put,
        &format!("/rate-limiters/{name}"),
        json!({"rate": 10, "per_ms": 1000, "burst": 10}),
    )
    .await;
    if redlocks {
        ok(
            app,
            key,
            post,
            &format!("/redlocks/{name}/acquire"),
            json!({}),
        )
        .await;
    }
}

const KINDS: [&str; 6] = [
    "locks",
    "fair-locks",
    "rwlocks",
    "semaphores",
    "latches",
    "rate-limiters",
];

#[tokio::test]
async fn every_kind_is_listed_with_its_state_and_filtered_by_prefix() {
    let main = redis();
    let nodes: Vec<RedisServer> = (0..3).map(|_| redis()).collect();
    let app = spawn_app(Config {
        redlock_nodes: nodes.iter().map(RedisServer::url).collect(),
        ..test_config(&main)
    })
    .await;
    for name in ["ls-a1", "ls-a2", "ls-b1"] {
        create_each(&app, None, name, true).await;
    }
    for kind in KINDS.iter().chain(&["redlocks"]) {
        let all = list_all(&app, None, &format!("/{kind}")).await;
        assert_eq!(
            names(&all),
            BTreeSet::from(["ls-a1".into(), "ls-a2".into(), "ls-b1".into()]),
            "{kind}: {all:?}"
        );
        // Each item is what GET /{kind}/{name} shows.
        let one = all.iter().find(|i| i["name"] == "ls-a1").unwrap();
        let (_, read) = call(&app, None, Method::GET, &format!("/{kind}/ls-a1"), None).await;
        let same_keys: BTreeSet<_> = read.as_object().unwrap().keys().collect();
        assert_eq!(
            one.as_object().unwrap().keys().collect::<BTreeSet<_>>(),
            same_keys,
            "{kind}"
        );
        let filtered = list_all(&app, None, &format!("/{kind}?prefix=ls-a")).await;
        assert_eq!(
            names(&filtered),
            BTreeSet::from(["ls-a1".into(), "ls-a2".into()]),
            "{kind} with a prefix"
        );
        assert!(
            list_all(&app, None, &format!("/{kind}?prefix=zz"))
                .await
                .is_empty()
        );
    }
    let lock = list_all(&app, None, "/locks?prefix=ls-a1").await;
    assert_eq!(lock[0]["locked"], true, "{lock:?}");
    let sem = list_all(&app, None, "/semaphores?prefix=ls-a1").await;
    assert_eq!(sem[0]["permits"], 3, "{sem:?}");
    let latch = list_all(&app, None, "/latches?prefix=ls-b").await;
    assert_eq!(latch[0]["count"], 2, "{latch:?}");

    // A released lock's hash is gone: it is no object any more.
    let grant = app.must_acquire("ls-gone", json!({})).await;
    assert!(names(&list_all(&app, None, "/locks").await).contains("ls-gone"));
    app.release("ls-gone", grant["holder"].as_str().unwrap())
        .await;
    assert!(!names(&list_all(&app, None, "/locks").await).contains("ls-gone"));
}

#[tokio::test]
async fn sessions_are_listed_without_their_ids() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let created = ok(
            &app,
            None,
            Method::POST,
            "/sessions",
            json!({"ttl_ms": 60000}),
        )
        .await;
        ids.push(created["session"].as_str().expect("an id").to_string());
    }
    ok(
        &app,
        None,
        Method::POST,
        "/locks/in-session/acquire",
        json!({"session": ids[0]}),
    )
    .await;
    let items = list_all(&app, None, "/sessions?limit=2").await;
    assert_eq!(items.len(), 3, "{items:?}");
    let text = serde_json::to_string(&items).unwrap();
    for id in &ids {
        assert!(!text.contains(id.as_str()), "an id listed: {text}");
    }
    for item in &items {
        assert!(item.get("session").is_none(), "{item}");
        assert!(item.get("owner").is_some(), "{item}");
        assert_eq!(item["ttl_ms"], 60000, "{item}");
    }
    let holds: u64 = items.iter().map(|i| i["holds"].as_u64().unwrap()).sum();
    assert_eq!(holds, 1);
    // No prefix: ids cannot be searched by.
    let (status, problem) = call(&app, None, Method::GET, "/sessions?prefix=a", None).await;
    assert_eq!(status, 400, "{problem}");
}

#[tokio::test]
async fn paging_one_at_a_time_lists_each_of_25_objects() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let want: BTreeSet<String> = (0..25).map(|i| format!("pg-{i:02}")).collect();
    for name in &want {
        app.must_acquire(name, json!({"lease_ms": 60000})).await;
        ok(
            &app,
            None,
            Method::PUT,
            &format!("/latches/{name}"),
            json!({"count": 1}),
        )
        .await;
    }
    for kind in ["locks", "latches"] {
        let items = list_all(&app, None, &format!("/{kind}?limit=1")).await;
        assert_eq!(names(&items), want, "{kind}");
        let mut pages = 0;
        let mut cursor: Option<String> = None;
        loop {
            let url = match &cursor {
                Some(c) => format!("/{kind}?limit=1&cursor={c}"),
                None => format!("/{kind}?limit=1"),
            };
            let (_, page) = call(&app, None, Method::GET, &url, None).await;
            assert!(page["items"].as_array().unwrap().len() <= 1, "{page}");
            pages += 1;
            match page["cursor"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => break,
            }
        }
        assert!(pages >= 25, "{kind}: {pages} pages");
    }
}

#[tokio::test]
async fn a_namespace_lists_none_of_another_namespaces_objects() {
    let redis = redis();
    let app = spawn_app(keyed(test_config(&redis))).await;
    create_each(&app, Some(A_ADMIN), "mine-a", false).await;
    create_each(&app, Some(B_ADMIN), "mine-b", false).await;
    ok(
        &app,
        Some(B_ADMIN),
        Method::POST,
        "/sessions",
        json!({"ttl_ms": 60000}),
    )
    .await;
    for kind in KINDS {
        let a = names(&list_all(&app, Some(A_CLIENT), &format!("/{kind}")).await);
        let b = names(&list_all(&app, Some(B_ADMIN), &format!("/{kind}")).await);
        assert_eq!(a, BTreeSet::from(["mine-a".to_string()]), "{kind}");
        assert_eq!(b, BTreeSet::from(["mine-b".to_string()]), "{kind}");
        let (status, _) = call(&app, None, Method::GET, &format!("/{kind}"), None).await;
        assert_eq!(status, 401, "{kind} without a key");
    }
    assert!(list_all(&app, Some(A_CLIENT), "/sessions").await.is_empty());
    assert_eq!(list_all(&app, Some(B_ADMIN), "/sessions").await.len(), 1);
}

#[tokio::test]
async fn bad_limits_cursors_and_prefixes_are_400() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    for (query, slug) in [
        ("limit=0", "out-of-range"),
        ("limit=1001", "out-of-range"),
        ("limit=-1", "invalid-body"),
        ("limit=ten", "invalid-body"),
        ("cursor=garbage", "invalid-body"),
        ("cursor=", "invalid-body"),
        ("prefix=a*", "invalid-name"),
        ("prefix=a%2Fb", "invalid-name"),
        (&format!("prefix={}", "a".repeat(257)), "invalid-name"),
        ("colour=red", "invalid-body"),
    ] {
        for kind in ["locks", "semaphores"] {
            let response = app
                .client
                .get(app.url(&format!("/{kind}?{query}")))
                .send()
                .await
                .unwrap();
            assert_problem(response, 400, slug).await;
        }
    }
    // The bounds themselves are fine.
    for query in ["limit=1", "limit=1000", "prefix=", "prefix=a.b~c:d-e_f"] {
        let (status, body) = call(&app, None, Method::GET, &format!("/locks?{query}"), None).await;
        assert_eq!(status, 200, "{query}: {body}");
    }
    // RedLocks without nodes: 503, as their other routes.
    let (status, body) = call(&app, None, Method::GET, "/redlocks", None).await;
    assert_eq!(status, 503, "{body}");
}

#[tokio::test]
async fn whoami_says_the_keys_namespace_and_role() {
    let redis = redis();
    let open = spawn_app(test_config(&redis)).await;
    let (status, me) = call(&open, None, Method::GET, "/whoami", None).await;
    assert_eq!(
        (status, me),
        (200, json!({"namespace": null, "role": "admin"}))
    );

    let keyed = spawn_app(keyed(test_config(&redis))).await;
    let (status, me) = call(&keyed, Some(A_CLIENT), Method::GET, "/whoami", None).await;
    assert_eq!(
        (status, me),
        (200, json!({"namespace": "team-a", "role": "client"}))
    );
    let (status, me) = call(&keyed, Some(B_ADMIN), Method::GET, "/whoami", None).await;
    assert_eq!(
        (status, me),
        (200, json!({"namespace": "team-b", "role": "admin"}))
    );
    let response = keyed.client.get(keyed.url("/whoami")).send().await.unwrap();
    assert_problem(response, 401, "unauthorized").await;
    let response = keyed
        .client
        .get(keyed.url("/whoami"))
        .bearer_auth("not-a-key")
        .send()
        .await
        .unwrap();
    assert_problem(response, 401, "unauthorized").await;
}

#[tokio::test]
async fn a_cluster_listing_misses_nothing_present_throughout_while_objects_come_and_go() {
    let cluster = RedisCluster::start(3).expect("cluster starts");
    let app = Arc::new(
        spawn_app(Config {
            redis_mode: RedisMode::Cluster,
            ..test_config_for(cluster.urls())
        })
        .await,
    );
    // Objects present throughout, spread over the masters.
    let stable: BTreeSet<String> = (0..60).map(|i| format!("keep-{i:02}")).collect();
    for name in &stable {
        app.must_acquire(name, json!({"lease_ms": 120000})).await;
    }
    // Meanwhile, other tasks create and delete objects.
    let stop = Arc::new(AtomicBool::new(false));
    let churn: Vec<_> = (0..3)
        .map(|t| {
            let (app, stop) = (app.clone(), stop.clone());
            tokio::spawn(async move {
                let mut n = 0u64;
                let mut held = std::collections::VecDeque::new();
                while !stop.load(Ordering::Relaxed) {
                    let name = format!("churn-{t}-{n}");
                    let grant = app.must_acquire(&name, json!({"lease_ms": 60000})).await;
                    held.push_back((name, grant["holder"].as_str().unwrap().to_string()));
                    // Every other step, and whenever more than five are
                    // held, the oldest is deleted again.
                    if held.len() > 5 || n % 2 == 1 {
                        let (name, holder) = held.pop_front().unwrap();
                        app.release(&name, &holder).await;
                    }
                    n += 1;
                }
                n
            })
        })
        .collect();
    for limit in [1, 7, 1000] {
        let items = list_all(&app, None, &format!("/locks?limit={limit}")).await;
        let listed = names(&items);
        let missed: Vec<_> = stable.difference(&listed).collect();
        assert!(missed.is_empty(), "limit {limit}: missed {missed:?}");
    }
    stop.store(true, Ordering::Relaxed);
    for task in churn {
        assert!(task.await.unwrap() > 0, "the churn ran");
    }
    // Every master was scanned: the stable names live on all three.
    let all = names(&list_all(&app, None, "/locks?prefix=keep-").await);
    assert_eq!(all, stable);
}

#[tokio::test]
async fn listed_locks_and_sessions_show_their_owners_and_never_an_id() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let grant = app
        .must_acquire("owned", json!({"owner": "web-7 pid 4242 POST /orders/42"}))
        .await;
    let session = ok(
        &app,
        None,
        Method::POST,
        "/sessions",
        json!({"ttl_ms": 60000, "owner": "cron nightly-export"}),
    )
    .await;
    let locks = list_all(&app, None, "/locks").await;
    assert_eq!(
        locks[0]["holds"][0]["owner"], "web-7 pid 4242 POST /orders/42",
        "{locks:?}"
    );
    let sessions = list_all(&app, None, "/sessions").await;
    assert_eq!(sessions[0]["owner"], "cron nightly-export", "{sessions:?}");
    let text = format!("{locks:?}{sessions:?}");
    assert!(!text.contains(grant["holder"].as_str().unwrap()), "{text}");
    assert!(
        !text.contains(session["session"].as_str().unwrap()),
        "{text}"
    );
}

/// The cursor's shard fails over between two pages: the next page scans
/// that shard again from its start (what it listed may come again), and
/// nothing present throughout is missed.
#[tokio::test]
async fn a_failover_mid_listing_restarts_that_masters_scan_and_misses_nothing() {
    use crate::sharded::{ask, owner, owner_seen_by, replica_of};
    let cluster = RedisCluster::start_with_replicas(3).expect("cluster starts");
    let app = spawn_app(Config {
        redis_mode: RedisMode::Cluster,
        ..test_config_for(cluster.urls())
    })
    .await;
    let stable: BTreeSet<String> = (0..40).map(|i| format!("fo-{i:02}")).collect();
    for name in &stable {
        app.must_acquire(name, json!({"lease_ms": 120000})).await;
    }
    // The first page comes from the master serving slot 0 (the first in
    // the listing's order).
    let (status, first) = call(&app, None, Method::GET, "/locks?limit=3", None).await;
    assert_eq!(status, 200, "{first}");
    let first_names = names(first["items"].as_array().unwrap());
    assert_eq!(first_names.len(), 3, "{first}");
    let cursor = first["cursor"].as_str().expect("more pages").to_string();
    let one = first_names.iter().next().unwrap();
    let key = format!("latchkey:{{{one}}}:lock");
    let master = owner(&cluster, 0, &key).await;
    let replica = replica_of(&cluster, master).await;
    assert!(
        eventually(std::time::Duration::from_secs(10), || async {
            let info: String = ask(&cluster.nodes[replica], &["INFO", "replication"]).await;
            info.contains("master_link_status:up")
        })
        .await,
        "the replica follows its master"
    );
    let acked: i64 = ask(&cluster.nodes[master], &["WAIT", "1", "500"]).await;
    assert_eq!(acked, 1, "the replica has every lock");

    let _: String = ask(&cluster.nodes[replica], &["CLUSTER", "FAILOVER"]).await;
    assert!(
        eventually(std::time::Duration::from_secs(15), || async {
            let role: Vec<redis::Value> = ask(&cluster.nodes[replica], &["ROLE"]).await;
            matches!(role.first(), Some(redis::Value::BulkString(b)) if b == b"master")
        })
        .await,
        "the replica takes over"
    );
    // The app asks any node for the layout: wait until the news of the
    // takeover reached every node (gossip), or a node that has not heard
    // yet sends the next page to the old master, now a replica with the
    // same keys, and its scan goes on instead of restarting.
    assert!(
        eventually(std::time::Duration::from_secs(15), || async {
            for via in 0..cluster.nodes.len() {
                if owner_seen_by(&cluster, via, &key).await != Some(replica) {
                    return false;
                }
            }
            true
        })
        .await,
        "every node names the replica as the slot's master"
    );
    // Follow the cursor (503s while the app learns the new topology are
    // retried).
    let mut items: Vec<Value> = Vec::new();
    let mut cursor = Some(cursor);
    let started = std::time::Instant::now();
    while let Some(c) = cursor.clone() {
        let (status, page) = call(
            &app,
            None,
            Method::GET,
            &format!("/locks?limit=3&cursor={c}"),
            None,
        )
        .await;
        if status == 503 && started.elapsed() < std::time::Duration::from_secs(15) {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            continue;
        }
        assert_eq!(status, 200, "{page}");
        items.extend(page["items"].as_array().unwrap().iter().cloned());
        cursor = page["cursor"].as_str().map(str::to_string);
    }
    let mut listed = names(&items);
    listed.extend(first_names.iter().cloned());
    assert_eq!(listed, stable, "nothing missed");
    // That master was scanned again from its start: the first page's
    // names come again.
    let again = names(&items);
    assert!(
        first_names.is_subset(&again),
        "{first_names:?} not listed again"
    );
}

/// RedLock tolerates a minority of its nodes down: a lock held on a
/// quorum is on a reachable node, so `GET /redlocks` still lists it (as
/// `GET /redlocks/{name}` still reads it), instead of failing the whole
/// listing with 503.
#[tokio::test]
async fn a_redlock_listing_with_one_node_of_three_down_still_lists_what_is_held() {
    let main = redis();
    let mut nodes: Vec<RedisServer> = (0..3).map(|_| redis()).collect();
    let app = spawn_app(Config {
        redlock_nodes: nodes.iter().map(RedisServer::url).collect(),
        ..test_config(&main)
    })
    .await;
    ok(
        &app,
        None,
        Method::POST,
        "/redlocks/rl-down/acquire",
        json!({"lease_ms": 60_000}),
    )
    .await;
    nodes[1].stop();
    let (status, read) = call(&app, None, Method::GET, "/redlocks/rl-down", None).await;
    assert_eq!(status, 200, "{read}");
    for limit in [1, 100] {
        let all = list_all(&app, None, &format!("/redlocks?limit={limit}")).await;
        assert_eq!(
            names(&all),
            BTreeSet::from(["rl-down".into()]),
            "limit {limit}: {all:?}"
        );
    }
    // Every node down: no listing can be made.
    nodes[0].stop();
    nodes[2].stop();
    let (status, page) = call(&app, None, Method::GET, "/redlocks", None).await;
    assert_eq!(status, 503, "{page}");
}
