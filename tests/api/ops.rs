//! Operations: readiness, Redis outages, pub/sub recovery, shutdown,
//! metrics, OpenAPI and Swagger UI.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn health_and_readiness_answer_when_redis_is_up() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let health = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    assert_eq!(
        ready.json::<serde_json::Value>().await.unwrap(),
        json!({"status": "ready"})
    );
}

#[tokio::test]
async fn redis_down_gives_503_without_hanging_then_recovers() {
    let mut redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("outage", json!({"holder": "a"})).await;

    redis.stop();
    let started = Instant::now();
    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.headers()["retry-after"], "1");
    assert_problem(ready, 503, "backend-unavailable").await;
    assert_problem(
        app.acquire("outage", json!({"holder": "b"})).await,
        503,
        "backend-unavailable",
    )
    .await;
    // Even a request that asked to wait answers at once: Redis is gone.
    assert_problem(
        app.acquire("outage", json!({"wait_ms": 10000})).await,
        503,
        "backend-unavailable",
    )
    .await;
    assert_problem(app.release("outage", "a").await, 503, "backend-unavailable").await;
    let get = app
        .client
        .get(app.url("/locks/outage"))
        .send()
        .await
        .unwrap();
    assert_problem(get, 503, "backend-unavailable").await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "503s took {:?}",
        started.elapsed()
    );
    // Liveness is not readiness.
    assert_eq!(
        app.client
            .get(app.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    redis.restart().expect("redis restarts on the same port");
    assert!(
        eventually(Duration::from_secs(10), || async {
            app.client
                .get(app.url("/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        })
        .await,
        "readyz recovers when Redis is back"
    );
    // The restarted Redis has no data and no scripts; both come back.
    app.must_acquire("outage", json!({"holder": "b"})).await;
    assert!(app.metrics().await.contains("latchkey_redis_errors_total"));
}

/// How many subscribers Redis counts on `channel` (`PUBSUB NUMSUB`).
async fn subscribers(conn: &mut redis::aio::MultiplexedConnection, channel: &str) -> i64 {
    let reply: (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(conn)
        .await
        .unwrap();
    reply.1
}

/// Every release publishes on its object's channel. An instance must be
/// sent only the messages of channels it has waiters on: with one pattern
/// for every channel, each instance of a deployment received (and
/// dropped) every release of every other one, and its own.
#[tokio::test]
async fn an_instance_is_sent_only_the_wake_ups_of_objects_it_waits_on() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let mut conn = redis_conn(&redis).await;
    let before = app.metric("latchkey_pubsub_messages_total").await;
    for i in 0..20 {
        let name = format!("nobody-waits-{i}");
        app.must_acquire(&name, json!({"holder": "a"})).await;
        app.release(&name, "a").await;
    }
    let patterns: i64 = redis::cmd("PUBSUB")
        .arg("NUMPAT")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(patterns, 0, "no pattern subscription");
    // A message sent to the instance arrives after the release's answer:
    // give any a moment.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = app.metric("latchkey_pubsub_messages_total").await;
    assert_eq!(
        after - before,
        0.0,
        "messages of 20 releases nobody waited on"
    );

    // A waiter's channel is subscribed while it waits, and woken by the
    // release at once (long before the 30 s lease ends) …
    let channel = "latchkey:{watched}:lock:wake";
    let waiter = app
        .held_with_waiter("watched", ("a", 30000), ("b", 20000))
        .await;
    let subscribed = eventually(Duration::from_secs(3), || async {
        subscribers(&mut conn.clone(), channel).await == 1
    })
    .await;
    assert!(subscribed, "the waiter's channel was never subscribed");
    let released = Instant::now();
    app.release("watched", "a").await;
    assert_eq!(waiter.await.unwrap().status(), 201);
    assert!(released.elapsed() < Duration::from_secs(2));
    // … and given up once nobody waits on it.
    let unsubscribed = eventually(Duration::from_secs(3), || async {
        subscribers(&mut conn.clone(), channel).await == 0
    })
    .await;
    assert!(unsubscribed, "the channel stayed subscribed with no waiter");
}

#[tokio::test]
async fn the_pubsub_hub_recovers_from_client_kill() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let mut conn = redis_conn(&redis).await;
    let channel = "latchkey:{after-kill}:lock:wake";
    let waiter = app
        .held_with_waiter("after-kill", ("a", 30000), ("b", 20000))
        .await;
    let watcher = conn.clone();
    let subscribed = || async { subscribers(&mut watcher.clone(), channel).await == 1 };
    assert!(
        eventually(Duration::from_secs(3), subscribed).await,
        "the waiter's channel is subscribed"
    );
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(killed, 1, "the hub's one dedicated subscriber connection");
    assert!(
        eventually(Duration::from_secs(5), || async {
            app.metrics()
                .await
                .contains("latchkey_pubsub_reconnects_total 1")
        })
        .await,
        "the hub reconnects"
    );
    assert!(
        eventually(Duration::from_secs(3), subscribed).await,
        "the waiter's channel is subscribed again"
    );

    // The waiter is woken by pub/sub again: a release hands over at once,
    // long before the 30 s lease would end.
    let released = Instant::now();
    app.release("after-kill", "a").await;
    assert_eq!(waiter.await.unwrap().status(), 201);
    assert!(released.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn shutdown_ends_open_long_polls_with_503_shutting_down() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("bye", json!({"holder": "a"})).await;
    let poll = app.spawn_post(
        "/locks/bye/acquire",
        json!({"holder": "b", "wait_ms": 30000}),
    );
    let sse = app
        .client
        .post(app.url("/locks/bye/acquire"))
        .header("accept", "text/event-stream")
        .json(&json!({"holder": "c", "wait_ms": 30000}))
        .send()
        .await
        .unwrap();
    let sse = tokio::spawn(read_sse(sse));
    app.wait_for_waiters("bye", 2).await;
    let started = Instant::now();
    app.shutdown.cancel();
    let response = poll.await.unwrap();
    assert_eq!(response.headers()["retry-after"], "1");
    assert_problem(response, 503, "shutting-down").await;
    let events = sse.await.unwrap();
    assert_eq!(
        events.last().map(|e| e.0.as_str()),
        Some("error"),
        "{events:?}"
    );
    assert_eq!(events.last().unwrap().1["type"], "/problems/shutting-down");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
}

/// SIGTERM to the real binary while a long-poll is open: the poll ends
/// 503 and the process exits cleanly.
#[tokio::test]
async fn sigterm_during_an_open_long_poll_answers_503_and_exits_cleanly() {
    let redis = redis();
    let (mut child, base, client) = ready_binary(&redis.url(), &[]).await;
    let r = client
        .post(format!("{base}/locks/term/acquire"))
        .json(&json!({"holder": "a"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let poll = tokio::spawn({
        let (client, base) = (client.clone(), base.clone());
        async move {
            client
                .post(format!("{base}/locks/term/acquire"))
                .json(&json!({"holder": "b", "wait_ms": 30000}))
                .send()
                .await
                .unwrap()
        }
    });
    assert!(
        eventually(Duration::from_secs(3), || async {
            let s: serde_json::Value = client
                .get(format!("{base}/locks/term"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            s["waiters"] == 1
        })
        .await
    );
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let started = Instant::now();
    assert_problem(poll.await.unwrap(), 503, "shutting-down").await;
    let exit = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success(), "exit status {exit}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "shutdown took {:?}",
        started.elapsed()
    );
}

#[test]
fn dev_mode_without_redis_server_says_how_to_install_it() {
    let output = Command::new(env!("CARGO_BIN_EXE_latchkey"))
        .env_remove("LATCHKEY_REDIS_URL")
        .env("PATH", "/nonexistent")
        .env("LATCHKEY_LISTEN", "127.0.0.1:0")
        .output()
        .expect("binary runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("apt-get install -y redis-server"),
        "{stderr}"
    );
}

#[test]
fn bad_configuration_stops_the_process_with_a_clear_message() {
    let output = Command::new(env!("CARGO_BIN_EXE_latchkey"))
        .env("LATCHKEY_MIN_LEASE_MS", "9000")
        .env("LATCHKEY_MAX_LEASE_MS", "1000")
        .output()
        .expect("binary runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("min_lease_ms (9000) is larger than max_lease_ms (1000)"),
        "{stderr}"
    );
}

#[test]
fn an_unknown_latchkey_variable_is_logged_with_the_closest_setting() {
    let redis = redis();
    let lines = start_up_log(&redis.url(), &[("LATCHKEY_MAX_WAITERZ", "5")]);
    let warning = lines
        .iter()
        .find(|l| l.contains("LATCHKEY_MAX_WAITERZ"))
        .unwrap_or_else(|| panic!("no warning in {lines:?}"));
    let log: serde_json::Value = serde_json::from_str(warning).expect("JSON log line");
    assert_eq!(log["level"], "WARN", "{warning}");
    assert_eq!(
        log["fields"]["message"],
        "unknown setting LATCHKEY_MAX_WAITERZ; did you mean LATCHKEY_MAX_WAITERS?"
    );
}

/// Runs the binary with these flags and variables and a config file holding
/// `file`; returns its exit code and standard error.
fn run_binary(args: &[&str], env: &[(&str, &str)], file: &str) -> (Option<i32>, String) {
    let path = std::env::temp_dir().join(format!(
        "latchkey-test-{}-{}.toml",
        std::process::id(),
        next_file_number()
    ));
    std::fs::write(&path, file).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_latchkey"))
        .args(args)
        .env("LATCHKEY_CONFIG", &path)
        .envs(env.iter().copied())
        .output()
        .expect("binary runs");
    std::fs::remove_file(&path).unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), stderr)
}

fn next_file_number() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[test]
fn flags_beat_variables_which_beat_the_file_which_beats_the_defaults() {
    let file = "min_lease_ms = 100\nmax_lease_ms = 1000\ndefault_lease_ms = 500\n";
    // The file's max over the default, the variable's min over the file's.
    let (code, stderr) = run_binary(&[], &[("LATCHKEY_MIN_LEASE_MS", "5000")], file);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("min_lease_ms (5000) is larger than max_lease_ms (1000)"),
        "{stderr}"
    );
    // The flag's min over the variable's.
    let (code, stderr) = run_binary(
        &["--min-lease-ms", "7000"],
        &[("LATCHKEY_MIN_LEASE_MS", "5000")],
        file,
    );
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("min_lease_ms (7000) is larger than max_lease_ms (1000)"),
        "{stderr}"
    );
}

#[test]
fn bad_values_are_reported_with_the_file_variable_or_flag_they_came_from() {
    let (code, stderr) = run_binary(&[], &[], "max_waiters = \"lots\"\n");
    assert_eq!(code, Some(2));
    assert!(stderr.contains("`max_waiters` in "), "{stderr}");
    assert!(stderr.contains("must be a whole number"), "{stderr}");
    let (_, stderr) = run_binary(&[], &[("LATCHKEY_MAX_WAITERS", "lots")], "");
    assert!(
        stderr.contains("LATCHKEY_MAX_WAITERS must be a whole number"),
        "{stderr}"
    );
    let (_, stderr) = run_binary(
        &["--max-waiters=lots"],
        &[("LATCHKEY_MAX_WAITERS", "5")],
        "",
    );
    assert!(
        stderr.contains("--max-waiters must be a whole number"),
        "{stderr}"
    );
    let (_, stderr) = run_binary(&[], &[("LATCHKEY_QUEUE_GRACE_MS", "1")], "");
    assert!(
        stderr.contains("LATCHKEY_QUEUE_GRACE_MS must be between 100 and 3600000, got 1"),
        "{stderr}"
    );
}

#[test]
fn help_and_version_print_and_exit() {
    let help = Command::new(env!("CARGO_BIN_EXE_latchkey"))
        .arg("--help")
        .env("LATCHKEY_REDIS_URL", "redis://:hunter2@host:6379")
        .output()
        .expect("binary runs");
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    for needle in [
        "--max-waiters",
        "LATCHKEY_MAX_WAITERS",
        "[default: 10000]",
        "--config",
    ] {
        assert!(text.contains(needle), "{needle} in {text}");
    }
    assert!(!text.contains("hunter2"), "help shows no variable's value");
    let version = Command::new(env!("CARGO_BIN_EXE_latchkey"))
        .arg("--version")
        .output()
        .expect("binary runs");
    assert!(version.status.success());
    assert_eq!(
        String::from_utf8_lossy(&version.stdout),
        format!("latchkey {}\n", env!("CARGO_PKG_VERSION"))
    );
}

/// Starts the binary in dev mode; returns it, once it listens, with the
/// ports of its private Redis servers (main node and RedLock nodes).
fn start_dev_mode() -> (std::process::Child, Vec<u16>) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_latchkey"))
        .env_remove("LATCHKEY_REDIS_URL")
        .env("LATCHKEY_LISTEN", format!("127.0.0.1:{port}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("binary runs");
    let mut lines = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map(|l| l.unwrap());
    let dev_line = lines
        .by_ref()
        .find(|l| l.contains("dev mode"))
        .expect("dev mode is announced");
    let log: serde_json::Value = serde_json::from_str(&dev_line).expect("JSON log line");
    let port_of = |url: &str| -> u16 {
        url.trim_end_matches('/')
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let mut ports = vec![port_of(log["fields"]["main"].as_str().unwrap())];
    // The RedLock node list is logged as a Debug list of URLs.
    let redlock = log["fields"]["redlock"].as_str().unwrap();
    ports.extend(
        redlock
            .split('"')
            .filter(|p| p.starts_with("redis://"))
            .map(port_of),
    );
    assert_eq!(
        ports.len(),
        4,
        "one main node and three RedLock nodes: {dev_line}"
    );
    assert!(lines.any(|l| l.contains("latchkey listening")));
    for port in &ports {
        assert!(std::net::TcpStream::connect(("127.0.0.1", *port)).is_ok());
    }
    (child, ports)
}

fn assert_all_stopped(ports: &[u16]) {
    let started = Instant::now();
    while ports
        .iter()
        .any(|p| std::net::TcpStream::connect(("127.0.0.1", *p)).is_ok())
    {
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "a dev redis-server outlived latchkey"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn dev_mode_starts_private_redis_servers_and_stops_them_on_sigterm() {
    let (mut child, ports) = start_dev_mode();
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(child.wait().unwrap().success());
    assert_all_stopped(&ports);
}

#[test]
fn dev_mode_leaves_no_redis_server_behind_even_on_sigkill() {
    let (mut child, ports) = start_dev_mode();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_all_stopped(&ports);
}

/// The directories of a dev mode's servers (`latchkey-redis-<pid>-<port>`
/// in the temporary directory) that exist.
fn dev_mode_dirs(pid: u32, ports: &[u16]) -> Vec<std::path::PathBuf> {
    ports
        .iter()
        .map(|port| std::env::temp_dir().join(format!("latchkey-redis-{pid}-{port}")))
        .filter(|dir| dir.is_dir())
        .collect()
}

#[test]
fn a_killed_dev_modes_directories_go_when_the_next_server_starts() {
    let (mut child, ports) = start_dev_mode();
    let pid = child.id();
    // Each server has its own directory (its log) while latchkey runs.
    assert_eq!(dev_mode_dirs(pid, &ports).len(), 4);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_all_stopped(&ports);
    // SIGKILL runs no destructor: the next private server started on this
    // machine (by any latchkey: dev mode, or this test) removes them.
    let next = latchkey::devredis::RedisServer::start().unwrap();
    assert_eq!(
        dev_mode_dirs(pid, &ports),
        Vec::<std::path::PathBuf>::new(),
        "a killed dev mode's directories are left behind"
    );
    // Its own stays while it runs, and goes when it stops.
    let own = std::env::temp_dir().join(format!(
        "latchkey-redis-{}-{}",
        std::process::id(),
        next.port()
    ));
    assert!(own.is_dir());
    drop(next);
    assert!(!own.exists());
}

#[test]
fn committed_openapi_document_matches_the_code() {
    let generated = latchkey::openapi_json();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        generated == committed,
        "openapi/openapi.json is stale; regenerate it with \
         `cargo run -- --print-openapi > openapi/openapi.json`"
    );
    let doc: serde_json::Value = serde_json::from_str(&generated).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let acquire = &doc["paths"]["/locks/{name}/acquire"]["post"];
    // Swagger UI's "Try it out" takes the lowest 2xx status and its first
    // media type for the Accept header: that must be JSON.
    let statuses: Vec<&String> = acquire["responses"].as_object().unwrap().keys().collect();
    let lowest_2xx = statuses
        .iter()
        .filter(|s| s.starts_with('2'))
        .min()
        .unwrap();
    assert_eq!(lowest_2xx.as_str(), "201");
    let media: Vec<&String> = acquire["responses"]["201"]["content"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(media, ["application/json", "text/event-stream"]);
    assert_eq!(acquire["requestBody"]["required"], false);
}

#[test]
fn committed_settings_reference_matches_the_binary() {
    let output = Command::new(env!("CARGO_BIN_EXE_latchkey"))
        .arg("--print-config-reference")
        .env_clear()
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let printed = String::from_utf8(output.stdout).unwrap();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/src/reference/settings.md"
    );
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        printed == committed,
        "docs/src/reference/settings.md is stale; regenerate it with \
         `cargo run -- --print-config-reference > docs/src/reference/settings.md`"
    );
    for variable in [
        "LATCHKEY_LISTEN",
        "LATCHKEY_REDIS_URL",
        "LATCHKEY_SHUTDOWN_GRACE_MS",
    ] {
        assert!(printed.contains(&format!("`{variable}`")), "{printed}");
    }
}

#[tokio::test]
async fn openapi_json_and_swagger_ui_are_served_offline() {
    let redis = redis();
    // With a key configured the served document is the committed one
    // (an open server leaves out the key requirement: tests/api/access.rs).
    let app = spawn_app(Config {
        api_keys: vec![format!("ns:admin:{}", "0".repeat(64))],
        ..test_config(&redis)
    })
    .await;
    let served: serde_json::Value = app.get_json("/openapi.json").await;
    assert_eq!(served, latchkey::http::openapi());
    let docs = app.client.get(app.url("/docs/")).send().await.unwrap();
    assert_eq!(docs.status(), 200);
    let html = docs.text().await.unwrap();
    assert!(html.contains("swagger"), "Swagger UI page");
    let init = app
        .client
        .get(app.url("/docs/swagger-initializer.js"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let compact: String = init.split_whitespace().collect();
    assert!(compact.contains(r#""validatorUrl":"none""#), "{init}");
    assert!(init.contains("/openapi.json"), "{init}");
}

#[tokio::test]
async fn example_request_bodies_in_the_document_are_accepted() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    let doc = latchkey::http::openapi();
    let acquire = &doc["paths"]["/locks/{name}/acquire"]["post"]["requestBody"]["content"]["application/json"]
        ["example"];
    assert_eq!(app.acquire("example", acquire.clone()).await.status(), 201);
}

#[tokio::test]
async fn metrics_count_requests_by_route_template_and_acquisitions_by_outcome() {
    let redis = redis();
    let app = spawn_app(test_config(&redis)).await;
    app.must_acquire("m1", json!({"holder": "a"})).await;
    app.acquire("m1", json!({"holder": "b"})).await;
    app.client.get(app.url("/nope")).send().await.unwrap();
    let text = app.metrics().await;
    assert!(text.contains(r#"latchkey_http_requests_total{method="POST",route="/locks/{name}/acquire",status="201"} 1"#), "{text}");
    assert!(text.contains(r#"latchkey_http_requests_total{method="POST",route="/locks/{name}/acquire",status="409"} 1"#));
    assert!(text.contains(r#"route="unmatched""#));
    assert!(text.contains(r#"latchkey_acquisitions_total{outcome="acquired",primitive="lock"} 1"#));
    assert!(text.contains(r#"latchkey_acquisitions_total{outcome="busy",primitive="lock"} 1"#));
    assert!(text.contains(r#"latchkey_script_duration_seconds_count{script="lock_acquire"}"#));
    assert!(text.contains("latchkey_waiters 0"));
    assert!(!text.contains("m1"), "object names never appear in labels");
}

#[tokio::test]
async fn min_replicas_waits_for_acknowledgement_and_gives_the_grant_back_when_missing() {
    let primary = redis();
    let port = primary.port().to_string();
    let mut replica =
        latchkey::devredis::RedisServer::start_with(&["--replicaof", "127.0.0.1", &port])
            .expect("replica starts");
    assert!(replica_in_sync(&primary).await, "replica in sync");
    let mut conn = redis_conn(&primary).await;
    let app = spawn_app(Config {
        min_replicas: 1,
        // WAIT gets half the response timeout; leave room for a loaded CI.
        redis_response_timeout_ms: 4000,
        ..test_config(&primary)
    })
    .await;
    app.must_acquire("acked", json!({"holder": "a"})).await;
    assert_eq!(app.release("acked", "a").await.status(), 200);
    let set = json!({"names": ["acked-1", "acked-2"], "holder": "a"});
    assert_eq!(
        app.post("/multilocks/acquire", set.clone()).await.status(),
        201
    );
    assert_eq!(app.post("/multilocks/release", set).await.status(), 200);

    replica.stop();
    let response = app.acquire("unacked", json!({"holder": "b"})).await;
    let problem = assert_problem(response, 503, "backend-unavailable").await;
    assert!(
        problem["detail"].as_str().unwrap().contains("replica"),
        "{problem}"
    );
    assert!(
        eventually(Duration::from_secs(3), || async {
            app.state("unacked").await["locked"] == false
        })
        .await,
        "a grant the client was told failed must not stay held"
    );
    let response = app
        .post(
            "/multilocks/acquire",
            json!({"names": ["unacked-1", "unacked-2"], "holder": "b"}),
        )
        .await;
    assert_problem(response, 503, "backend-unavailable").await;
    for name in ["unacked-1", "unacked-2"] {
        assert!(
            eventually(Duration::from_secs(3), || async {
                app.state(name).await["locked"] == false
            })
            .await,
            "{name}: a set the client was told failed is given back whole"
        );
    }
    let _: () = redis::cmd("PING").query_async(&mut conn).await.unwrap();
}

/// Resident memory of a process, in KiB (Linux).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Opens `n` keep-alive connections to the binary, each after one answered
/// `GET /healthz`, and keeps them open.
async fn open_connections(port: u16, n: usize) -> Vec<tokio::net::TcpStream> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut open = Vec::with_capacity(n);
    for _ in 0..n {
        let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        conn.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut head = [0u8; 512];
        let read = conn.read(&mut head).await.unwrap();
        assert!(head[..read].starts_with(b"HTTP/1.1 200"));
        open.push(conn);
    }
    open
}

/// An open connection must not cost a copy of the route table: axum,
/// handed a `Router` to serve, rebuilt every route's service for each
/// connection (~1.6 KiB per route, so the cost grew with every new
/// primitive). The real binary's RSS growth per idle keep-alive
/// connection stays small: ~13–19 KiB measured, 37–55 KiB before the fix.
#[tokio::test]
async fn an_open_connection_does_not_cost_a_copy_of_the_routes() {
    let redis = redis();
    let (mut child, port) = start_binary(&redis.url(), &[]);
    let client = reqwest::Client::new();
    let up = eventually(Duration::from_secs(10), || async {
        client
            .get(format!("http://127.0.0.1:{port}/healthz"))
            .send()
            .await
            .is_ok()
    })
    .await;
    assert!(up, "the binary serves");
    // Warm up the allocator and the runtime's buffers first.
    let warm = open_connections(port, 200).await;
    drop(warm);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = rss_kib(child.id());
    let n = 500;
    let open = open_connections(port, n).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let per_connection = (rss_kib(child.id()).saturating_sub(before)) as f64 / n as f64;
    drop(open);
    child.kill().ok();
    child.wait().ok();
    eprintln!("RSS per open connection: {per_connection:.1} KiB");
    assert!(
        per_connection < 28.0,
        "each open connection costs {per_connection:.1} KiB of RSS"
    );
}

/// The schema must not allow what the service refuses (schemathesis found
/// both): a multi-lock's names are distinct valid lock names, and an
/// `Idempotency-Key` is 1-255 visible ASCII characters.
#[test]
fn the_openapi_schema_describes_names_and_idempotency_keys_as_checked() {
    let doc: serde_json::Value =
        serde_json::from_str(&latchkey::openapi_json()).expect("the document is JSON");
    for body in [
        "MultiAcquireRequest",
        "MultiHeartbeatRequest",
        "MultiReleaseRequest",
    ] {
        let names = &doc["components"]["schemas"][body]["properties"]["names"];
        assert_eq!(names["uniqueItems"], true, "{body}: {names}");
        assert_eq!(
            names["items"]["$ref"], "#/components/schemas/LockName",
            "{body}"
        );
    }
    assert_eq!(
        doc["components"]["schemas"]["LockName"]["pattern"],
        "^[A-Za-z0-9._~:-]{1,256}$"
    );
    let params = doc["paths"]["/latches/{name}/count-down"]["post"]["parameters"]
        .as_array()
        .expect("parameters");
    let key = params
        .iter()
        .find(|p| p["name"] == "Idempotency-Key")
        .expect("the header is documented");
    assert_eq!(key["schema"]["pattern"], "^[!-~]{1,255}$");
}
