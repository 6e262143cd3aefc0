//! API keys, roles and namespaces: keys are configured as SHA-256 hashes
//! bound to a namespace and a role; every object lives in its key's
//! namespace.

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use reqwest::{Method, Response};
use serde_json::{Value, json};

use crate::helpers::*;

const A_CLIENT: &str = "key-of-team-a-client-0123456789";
const A_ADMIN: &str = "key-of-team-a-admin-0123456789";
const B_CLIENT: &str = "key-of-team-b-client-0123456789";
const B_ADMIN: &str = "key-of-team-b-admin-0123456789";

/// The test configuration with the four keys of teams A and B.
fn keyed_config(redis: &latchkey::devredis::RedisServer) -> Config {
    Config {
        api_keys: vec![
            key_entry("team-a", "client", A_CLIENT),
            key_entry("team-a", "admin", A_ADMIN),
            key_entry("team-b", "client", B_CLIENT),
            key_entry("team-b", "admin", B_ADMIN),
        ],
        ..test_config(redis)
    }
}

/// A request to `app` with `key` (none: no Authorization header).
async fn send(
    app: &TestApp,
    key: Option<&str>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Response {
    let mut request = app.client.request(method, app.url(path));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.expect("request sent")
}

/// [`send`], and the JSON body of its answer, which must have `status`.
async fn must(
    app: &TestApp,
    key: Option<&str>,
    method: Method,
    path: &str,
    body: Option<Value>,
    status: u16,
) -> Value {
    json_of(send(app, key, method, path, body).await, status).await
}

async fn json_of(response: Response, status: u16) -> Value {
    let got = response.status().as_u16();
    let body: Value = response.json().await.expect("a JSON body");
    assert_eq!(got, status, "{body}");
    body
}

#[tokio::test]
async fn without_keys_the_service_is_open_and_its_document_asks_for_none() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let grant = must(&app, None, Method::POST, "/locks/open/acquire", None, 201).await;
    assert_eq!(grant["name"], "open");
    let forced = send(&app, None, Method::DELETE, "/locks/open", None).await;
    assert_eq!(forced.status(), 200, "anyone is admin of an open service");
    let doc = app.get_json("/openapi.json").await;
    assert!(
        doc["components"].get("securitySchemes").is_none(),
        "{}",
        doc["components"]
    );
    let operation = &doc["paths"]["/locks/{name}/acquire"]["post"];
    assert!(operation.get("security").is_none());
    assert!(operation["responses"].get("401").is_none());
}

#[tokio::test]
async fn a_request_without_a_known_key_gets_401_with_www_authenticate() {
    let redis = redis();
    let app = spawn_app(keyed_config(&redis)).await;
    for key in [None, Some("not-a-configured-key")] {
        let response = send(&app, key, Method::POST, "/locks/x/acquire", None).await;
        assert_eq!(response.status(), 401);
        assert_eq!(
            response.headers()["www-authenticate"],
            "Bearer realm=\"latchkey\""
        );
        let problem = assert_problem(response, 401, "unauthorized").await;
        assert!(
            !problem.to_string().contains("not-a-configured-key"),
            "{problem}"
        );
    }
    // Another scheme is no key either.
    let basic = app
        .client
        .get(app.url("/locks/x"))
        .header("authorization", format!("Basic {A_CLIENT}"))
        .send()
        .await
        .unwrap();
    assert_problem(basic, 401, "unauthorized").await;
    // Nothing was acquired by the refused requests.
    let state = must(&app, Some(A_CLIENT), Method::GET, "/locks/x", None, 200).await;
    assert_eq!(state["fencing_token"], 0);
    // The operations endpoints, the document, Swagger UI and the console
    // page stay open.
    for path in [
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
        "/docs/",
        "/console",
    ] {
        let response = send(&app, None, Method::GET, path, None).await;
        assert_eq!(response.status(), 200, "{path}");
    }
    let doc = app.get_json("/openapi.json").await;
    assert_eq!(
        doc["components"]["securitySchemes"]["api_key"]["scheme"],
        "bearer"
    );
}

/// The real binary does not start when a key's hash is configured twice
/// (a key given to team `red` as a client, also bound as `blue`'s admin: in
/// the variable, or in an appended line of the mounted key file), and says
/// which entries clash, never the whole hash.
#[test]
fn the_binary_refuses_a_key_configured_twice_naming_the_entries() {
    use std::io::Read;
    let redis = redis();
    let red = key_entry("red", "client", A_CLIENT);
    let hash = red.rsplit(':').next().unwrap().to_string();
    let dir = std::env::temp_dir().join(format!("latchkey-keyfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("keys");
    let other = key_entry("team-b", "client", B_CLIENT);
    std::fs::write(&file, format!("{other}\nblue:admin:{hash}\n")).unwrap();
    let file = file.to_str().unwrap().to_string();
    let cases = [
        (
            vec![("LATCHKEY_API_KEYS", format!("{red},blue:admin:{hash}"))],
            vec![
                "red:client (entry 1 of LATCHKEY_API_KEYS)".to_string(),
                "blue:admin (entry 2 of LATCHKEY_API_KEYS)".to_string(),
            ],
        ),
        (
            vec![
                ("LATCHKEY_API_KEYS", red.clone()),
                ("LATCHKEY_API_KEYS_FILE", file.clone()),
            ],
            vec![
                "red:client (entry 1 of LATCHKEY_API_KEYS)".to_string(),
                format!("blue:admin (line 2 of {file})"),
            ],
        ),
    ];
    for (env, named) in cases {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_latchkey"))
            .env("LATCHKEY_REDIS_URL", redis.url())
            .env("LATCHKEY_LISTEN", "127.0.0.1:0")
            .env_remove("LATCHKEY_API_KEYS_FILE")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("latchkey binary starts");
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if started.elapsed() > Duration::from_secs(5) {
                child.kill().unwrap();
                child.wait().unwrap();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert!(
            status.is_some_and(|s| !s.success()),
            "it started (or exited 0): {status:?} {stderr}"
        );
        for entry in &named {
            assert!(
                stderr.contains(entry.as_str()),
                "{entry:?} not named: {stderr}"
            );
        }
        assert!(stderr.contains(&hash[..8]), "{stderr}");
        assert!(!stderr.contains(&hash[..16]), "the hash is shown: {stderr}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// More than one `Authorization` header is 401, whichever key comes first
/// (and even when both name the same key): a request is served with one
/// key or none, never with the first or last of several.
#[tokio::test]
async fn more_than_one_authorization_header_is_401_in_either_order() {
    let redis = redis();
    let app = spawn_app(keyed_config(&redis)).await;
    let twice = |method: Method, path: &str, first: &str, second: &str| {
        app.client
            .request(method, app.url(path))
            .header("authorization", format!("Bearer {first}"))
            .header("authorization", format!("Bearer {second}"))
    };
    for (first, second) in [(A_CLIENT, A_ADMIN), (A_ADMIN, A_CLIENT), (A_ADMIN, A_ADMIN)] {
        let configure = twice(Method::PUT, "/semaphores/s", first, second)
            .json(&json!({"permits": 2}))
            .send();
        let acquire = twice(Method::POST, "/locks/x/acquire", first, second).send();
        for response in [configure.await.unwrap(), acquire.await.unwrap()] {
            let url = response.url().path().to_string();
            assert_eq!(response.status(), 401, "{url}: {first}, then {second}");
            assert_eq!(
                response.headers()["www-authenticate"],
                "Bearer realm=\"latchkey\""
            );
            assert_problem(response, 401, "unauthorized").await;
        }
    }
    // Nothing was configured or acquired.
    must(&app, Some(A_ADMIN), Method::GET, "/semaphores/s", None, 404).await;
    let lock = must(&app, Some(A_CLIENT), Method::GET, "/locks/x", None, 200).await;
    assert_eq!(lock["fencing_token"], 0);
}

/// A request for every operation of the served document, with `key`, on
/// objects that exist; returns (operation id, the operation, status).
async fn every_operation(
    app: &TestApp,
    key: Option<&str>,
    admin: &str,
) -> Vec<(String, Value, u16)> {
    let doc = app.get_json("/openapi.json").await;
    let mut seen = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let id = operation["operationId"].as_str().unwrap().to_string();
            // Objects for the operation to find: a semaphore, a latch.
            send(
                app,
                Some(admin),
                Method::PUT,
                "/semaphores/s",
                Some(json!({"permits": 2})),
            )
            .await;
            send(
                app,
                Some(admin),
                Method::PUT,
                "/latches/l",
                Some(json!({"count": 5})),
            )
            .await;
            send(
                app,
                Some(admin),
                Method::PUT,
                "/rate-limiters/r",
                Some(json!({"rate": 100, "per_ms": 1000})),
            )
            .await;
            let name = if path.starts_with("/semaphores") {
                "s"
            } else if path.starts_with("/latches") {
                "l"
            } else if path.starts_with("/rate-limiters") {
                "r"
            } else {
                "o"
            };
            let url = path.replace("{name}", name).replace("{holder}", "h");
            let body = match (method.as_str(), path.as_str()) {
                ("put", p) if p.starts_with("/semaphores") => Some(json!({"permits": 3})),
                ("put", p) if p.starts_with("/rate-limiters") => {
                    Some(json!({"rate": 50, "per_ms": 1000}))
                }
                ("put", _) => Some(json!({"count": 2})),
                ("post", p) if p.starts_with("/multilocks") => {
                    Some(json!({"names": ["m1"], "holder": "h"}))
                }
                ("post", _) => Some(json!({})),
                _ => None,
            };
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let status = send(app, key, method, &url, body).await.status().as_u16();
            seen.push((id, operation.clone(), status));
        }
    }
    seen
}

#[tokio::test]
async fn a_client_key_gets_403_exactly_on_the_operations_documented_admin_only() {
    let redis = redis();
    let app = spawn_app(keyed_config(&redis)).await;
    let mut forbidden = Vec::new();
    for (id, operation, status) in every_operation(&app, Some(A_CLIENT), A_ADMIN).await {
        let responses = &operation["responses"];
        assert_ne!(status, 401, "{id}: the key is known");
        assert_eq!(
            status == 403,
            responses.get("403").is_some(),
            "{id} answered {status}; documented: {:?}",
            responses.as_object().unwrap().keys().collect::<Vec<_>>()
        );
        if status == 403 {
            forbidden.push(id);
        }
    }
    forbidden.sort();
    let mut expected = latchkey::http::access::ADMIN_OPERATIONS.to_vec();
    expected.sort();
    assert_eq!(forbidden, expected);
    // An admin key may do everything.
    for (id, _, status) in every_operation(&app, Some(A_ADMIN), A_ADMIN).await {
        assert!(
            status != 401 && status != 403,
            "{id} answered {status} to an admin"
        );
    }
    // No key: 401 exactly where the document says a key is needed.
    for (id, operation, status) in every_operation(&app, None, A_ADMIN).await {
        let open = operation["tags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "operations");
        assert_eq!(operation.get("security").is_some(), !open, "{id}");
        assert_eq!(operation["responses"].get("401").is_some(), !open, "{id}");
        assert_eq!(status == 401, !open, "{id} answered {status} without a key");
    }
}

#[tokio::test]
async fn namespaces_are_separate_worlds_for_every_primitive_across_two_instances() {
    let redis = redis();
    let one = spawn_app(keyed_config(&redis)).await;
    let two = spawn_app(keyed_config(&redis)).await;
    let (a, b) = (Some(A_CLIENT), Some(B_CLIENT));

    // Locks and fair locks: the same name is two objects.
    for kind in ["locks", "fair-locks"] {
        let held = must(
            &one,
            a,
            Method::POST,
            &format!("/{kind}/shared/acquire"),
            Some(json!({"holder": "ha"})),
            201,
        )
        .await;
        assert_eq!(held["name"], "shared", "the name as the client gave it");
        let other = must(
            &two,
            b,
            Method::POST,
            &format!("/{kind}/shared/acquire"),
            Some(json!({"holder": "hb"})),
            201,
        )
        .await;
        assert_eq!(other["fencing_token"], 1, "B's own counter");
        // B can neither release, renew, see nor force-unlock A's hold.
        let release = send(
            &two,
            b,
            Method::DELETE,
            &format!("/{kind}/shared/holders/ha"),
            None,
        )
        .await;
        assert_problem(release, 404, "not-held").await;
        let renew = send(
            &two,
            b,
            Method::POST,
            &format!("/{kind}/shared/holders/ha/heartbeat"),
            None,
        )
        .await;
        assert_problem(renew, 404, "not-held").await;
        send(
            &two,
            Some(B_ADMIN),
            Method::DELETE,
            &format!("/{kind}/shared"),
            None,
        )
        .await;
        let state = must(&one, a, Method::GET, &format!("/{kind}/shared"), None, 200).await;
        assert_eq!(
            state["locked"], true,
            "A's hold survives B's force unlock: {state}"
        );
        assert_eq!(state["fencing_token"], 1);
    }

    // Read-write locks.
    must(
        &one,
        a,
        Method::POST,
        "/rwlocks/doc/write/acquire",
        None,
        201,
    )
    .await;
    must(
        &two,
        b,
        Method::POST,
        "/rwlocks/doc/write/acquire",
        None,
        201,
    )
    .await;

    // Semaphores: A's configuration does not exist for B.
    must(
        &one,
        Some(A_ADMIN),
        Method::PUT,
        "/semaphores/pool",
        Some(json!({"permits": 1})),
        200,
    )
    .await;
    must(&one, a, Method::POST, "/semaphores/pool/acquire", None, 201).await;
    assert_problem(
        send(&two, b, Method::POST, "/semaphores/pool/acquire", None).await,
        404,
        "not-found",
    )
    .await;
    assert_problem(
        send(&two, b, Method::GET, "/semaphores/pool", None).await,
        404,
        "not-found",
    )
    .await;

    // Latches: A's latch is missing (open) for B, and B cannot count it down.
    must(
        &one,
        Some(A_ADMIN),
        Method::PUT,
        "/latches/go",
        Some(json!({"count": 1})),
        201,
    )
    .await;
    let seen = must(&two, b, Method::GET, "/latches/go", None, 200).await;
    assert_eq!(seen, json!({"name": "go", "count": 0, "open": true}));
    assert_problem(
        send(&two, b, Method::POST, "/latches/go/count-down", None).await,
        404,
        "not-found",
    )
    .await;
    let still = must(&one, a, Method::GET, "/latches/go", None, 200).await;
    assert_eq!(still["count"], 1);

    // Rate limiters: A's limiter does not exist for B, and B's acquires
    // take nothing of A's permits.
    must(
        &one,
        Some(A_ADMIN),
        Method::PUT,
        "/rate-limiters/quota",
        Some(json!({"rate": 2, "per_ms": 60000})),
        200,
    )
    .await;
    for status in [404, 404] {
        let answer = send(&two, b, Method::POST, "/rate-limiters/quota/acquire", None).await;
        assert_problem(answer, status, "not-found").await;
    }
    assert_problem(
        send(&two, b, Method::GET, "/rate-limiters/quota", None).await,
        404,
        "not-found",
    )
    .await;
    let quota = must(&one, a, Method::GET, "/rate-limiters/quota", None, 200).await;
    assert_eq!(quota["available"], 2);

    // Multi-locks take B's own locks, not A's of the same names.
    must(
        &two,
        b,
        Method::POST,
        "/multilocks/acquire",
        Some(json!({"names": ["shared", "m"], "holder": "hb"})),
        201,
    )
    .await;
    let blocked = assert_problem(
        send(
            &one,
            a,
            Method::POST,
            "/multilocks/acquire",
            Some(json!({"names": ["shared", "m"], "holder": "other"})),
        )
        .await,
        409,
        "lock-held",
    )
    .await;
    assert_eq!(
        blocked["blocked_by"],
        json!(["shared"]),
        "only A's own lock blocks A"
    );

    // Every key of a namespace starts with its prefix; none is shared.
    let mut conn = redis_conn(&redis).await;
    let keys: Vec<String> = conn.keys("*").await.unwrap();
    assert!(!keys.is_empty());
    for key in &keys {
        assert!(
            key.starts_with("latchkey:team-a:{") || key.starts_with("latchkey:team-b:{"),
            "{key}"
        );
    }
    assert!(
        keys.iter()
            .any(|k| k.starts_with("latchkey:team-a:{shared}"))
    );
    assert!(
        keys.iter()
            .any(|k| k.starts_with("latchkey:team-b:{shared}"))
    );
}

#[tokio::test]
async fn a_release_wakes_waiters_of_its_namespace_on_another_instance_and_no_other() {
    let redis = redis();
    let one = spawn_app(keyed_config(&redis)).await;
    let two = spawn_app(keyed_config(&redis)).await;
    must(
        &one,
        Some(A_CLIENT),
        Method::POST,
        "/locks/w/acquire",
        Some(json!({"holder": "first"})),
        201,
    )
    .await;
    must(
        &one,
        Some(B_CLIENT),
        Method::POST,
        "/locks/w/acquire",
        Some(json!({"holder": "b-holder", "lease_ms": 30000})),
        201,
    )
    .await;
    let waiting = {
        let request = two
            .client
            .post(two.url("/locks/w/acquire"))
            .bearer_auth(A_CLIENT)
            .json(&json!({"holder": "second", "wait_ms": 5000}));
        tokio::spawn(async move { request.send().await.unwrap() })
    };
    let b_waiting = {
        let request = two
            .client
            .post(two.url("/locks/w/acquire"))
            .bearer_auth(B_CLIENT)
            .json(&json!({"holder": "b-waiter", "wait_ms": 1500}));
        tokio::spawn(async move { request.send().await.unwrap() })
    };
    assert!(
        eventually(Duration::from_secs(3), || async {
            must(&two, Some(A_CLIENT), Method::GET, "/locks/w", None, 200).await["waiters"] == 1
        })
        .await
    );
    let released = Instant::now();
    let release = send(
        &one,
        Some(A_CLIENT),
        Method::DELETE,
        "/locks/w/holders/first",
        None,
    )
    .await;
    assert_eq!(release.status(), 200);
    let granted = waiting.await.unwrap();
    assert_eq!(granted.status(), 201);
    assert!(
        released.elapsed() < Duration::from_millis(1000),
        "woken, not polled: {:?}",
        released.elapsed()
    );
    // B's waiter on its own "w" (still held by B) is not granted by A's release.
    let b = b_waiting.await.unwrap();
    assert_problem(b, 409, "lock-held").await;
}

#[tokio::test]
async fn redlocks_are_namespaced_on_every_node() {
    let redis = redis();
    let nodes: Vec<_> = (0..3)
        .map(|_| latchkey::devredis::RedisServer::start().unwrap())
        .collect();
    let config = Config {
        redlock_nodes: nodes.iter().map(|n| n.url()).collect(),
        ..keyed_config(&redis)
    };
    let one = spawn_app(config.clone()).await;
    let two = spawn_app(config).await;
    let a = must(
        &one,
        Some(A_CLIENT),
        Method::POST,
        "/redlocks/r/acquire",
        Some(json!({"holder": "ha"})),
        201,
    )
    .await;
    assert_eq!(a["name"], "r");
    let b = must(
        &two,
        Some(B_CLIENT),
        Method::POST,
        "/redlocks/r/acquire",
        Some(json!({"holder": "hb"})),
        201,
    )
    .await;
    assert_eq!(b["fencing_token"], 1, "B's own counters");
    let foreign = send(
        &two,
        Some(B_CLIENT),
        Method::DELETE,
        "/redlocks/r/holders/ha",
        None,
    )
    .await;
    assert_problem(foreign, 404, "not-held").await;
    for node in &nodes {
        let mut conn = redis_conn(node).await;
        let keys: Vec<String> = conn.keys("*").await.unwrap();
        assert!(
            keys.iter()
                .all(|k| k.starts_with("latchkey:team-a:{") || k.starts_with("latchkey:team-b:{")),
            "{keys:?}"
        );
        assert!(
            keys.contains(&"latchkey:team-a:{r}:redlock".to_string()),
            "{keys:?}"
        );
        assert!(
            keys.contains(&"latchkey:team-b:{r}:redlock".to_string()),
            "{keys:?}"
        );
    }
}

#[tokio::test]
async fn a_wait_in_one_namespace_is_not_ended_by_the_same_name_in_another() {
    let redis = redis();
    let one = spawn_app(keyed_config(&redis)).await;
    let two = spawn_app(keyed_config(&redis)).await;
    // A's objects that make waiters wait: a held fair lock, a held write
    // lock, an exhausted semaphore, a closed latch.
    let (a, b) = (Some(A_CLIENT), Some(B_CLIENT));
    must(&one, a, Method::POST, "/fair-locks/f/acquire", None, 201).await;
    must(&one, a, Method::POST, "/rwlocks/w/write/acquire", None, 201).await;
    must(
        &one,
        Some(A_ADMIN),
        Method::PUT,
        "/semaphores/s",
        Some(json!({"permits": 1})),
        200,
    )
    .await;
    must(&one, a, Method::POST, "/semaphores/s/acquire", None, 201).await;
    must(
        &one,
        Some(A_ADMIN),
        Method::PUT,
        "/latches/l",
        Some(json!({"count": 1})),
        201,
    )
    .await;
    let waits = [
        (
            "/fair-locks/f/acquire",
            Method::POST,
            Some(json!({"wait_ms": 1500})),
        ),
        (
            "/rwlocks/w/read/acquire",
            Method::POST,
            Some(json!({"wait_ms": 1500})),
        ),
        (
            "/semaphores/s/acquire",
            Method::POST,
            Some(json!({"wait_ms": 1500})),
        ),
        ("/latches/l/wait?wait_ms=1500", Method::GET, None),
    ];
    let waiting: Vec<_> = waits
        .iter()
        .map(|(path, method, body)| {
            let mut request = two
                .client
                .request(method.clone(), two.url(path))
                .bearer_auth(A_CLIENT);
            if let Some(body) = body {
                request = request.json(body);
            }
            tokio::spawn(async move {
                let sent = Instant::now();
                (request.send().await.unwrap(), sent.elapsed())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // B does the same names: its own objects, none of which A waits on.
    must(&one, b, Method::POST, "/fair-locks/f/acquire", None, 201).await;
    send(&one, Some(B_ADMIN), Method::DELETE, "/fair-locks/f", None).await;
    must(&one, b, Method::POST, "/rwlocks/w/write/acquire", None, 201).await;
    send(&one, Some(B_ADMIN), Method::DELETE, "/rwlocks/w", None).await;
    must(
        &one,
        Some(B_ADMIN),
        Method::PUT,
        "/semaphores/s",
        Some(json!({"permits": 5})),
        200,
    )
    .await;
    must(
        &one,
        Some(B_ADMIN),
        Method::PUT,
        "/latches/l",
        Some(json!({"count": 1})),
        201,
    )
    .await;
    must(&one, b, Method::POST, "/latches/l/count-down", None, 200).await;
    for (task, (path, _, _)) in waiting.into_iter().zip(waits) {
        let (response, waited) = task.await.unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        if path.starts_with("/latches") {
            assert_eq!(
                body,
                json!({"count": 1, "open": false}),
                "{path}: A's latch is still closed"
            );
        } else {
            assert_eq!(status, 409, "{path}: {body}");
        }
        assert!(
            waited >= Duration::from_millis(1400),
            "{path} waited its wait out: {waited:?}"
        );
    }
}
