//! Test support: real redis-server processes and the real app on port 0.
//!
//! Every test starts its own redis-server (so tests are independent and can
//! run in parallel) and one or more app instances pointed at it. Set
//! `TEST_LOG=1` to see the service's logs.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use latchkey::app::Application;
pub use latchkey::config::Config;
use latchkey::devredis::{RedisServer, ServerTls};
use reqwest::{Response, StatusCode};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Starts a private redis-server. Call it from the test's own thread (the
/// test body), never from a spawned task: the server is tied to the thread
/// that started it.
pub fn redis() -> RedisServer {
    RedisServer::start().expect("redis-server starts (is it installed? see README)")
}

/// An `api_keys` entry binding `key` (its SHA-256) to `namespace` and
/// `role`.
pub fn key_entry(namespace: &str, role: &str, key: &str) -> String {
    use sha2::{Digest, Sha256};
    let hash: String = Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{namespace}:{role}:{hash}")
}

/// One running app instance.
pub struct TestApp {
    pub base: String,
    pub client: reqwest::Client,
    pub shutdown: CancellationToken,
    pub handle: Option<JoinHandle<std::io::Result<()>>>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(handle) = self.handle.take() {
            handle.abort();
        }
    }
}

/// The test defaults against `redis`: port 0, short Redis timeouts and a
/// short shutdown grace. Change fields with struct update syntax:
/// `spawn_app(Config { max_waiters: 1, ..test_config(&redis) })`.
pub fn test_config(redis: &RedisServer) -> Config {
    test_config_for(vec![redis.url()])
}

/// The test defaults against these Redis node URLs (set `redis_mode` too
/// for Sentinel or Cluster).
pub fn test_config_for(redis_urls: Vec<String>) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().expect("an address"),
        redis_urls,
        redis_connect_timeout_ms: 300,
        redis_response_timeout_ms: 1000,
        shutdown_grace_ms: 2000,
        ..Config::default()
    }
}

/// Starts the app with this configuration (see [`test_config`]).
pub async fn spawn_app(config: Config) -> TestApp {
    let (test_app, mut subscribed) = launch(config).await;
    // A test's first release must be heard: wait for the subscriber.
    tokio::time::timeout(Duration::from_secs(5), subscribed.wait_for(|up| *up))
        .await
        .expect("the pub/sub hub subscribes within 5 s")
        .expect("the hub is running");
    test_app
}

/// Starts the app without waiting for its pub/sub subscriber: for a Redis
/// the app cannot reach (or is not allowed into).
pub async fn spawn_app_unready(config: Config) -> TestApp {
    launch(config).await.0
}

async fn launch(config: Config) -> (TestApp, tokio::sync::watch::Receiver<bool>) {
    if std::env::var_os("TEST_LOG").is_some() {
        latchkey::telemetry::init("debug");
    }
    config.validate().expect("valid test configuration");
    let app = Application::build(config).await.expect("app builds");
    let base = format!("http://127.0.0.1:{}", app.port());
    let shutdown = app.shutdown_token();
    let subscribed = app.subscribed();
    let handle = tokio::spawn(app.run());
    let test_app = TestApp {
        base,
        client: reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .build()
            .expect("client builds"),
        shutdown,
        handle: Some(handle),
    };
    (test_app, subscribed)
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub async fn post(&self, path: &str, body: Value) -> Response {
        self.client
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .expect("request sent")
    }

    pub async fn acquire(&self, name: &str, body: Value) -> Response {
        self.post(&format!("/locks/{name}/acquire"), body).await
    }

    /// Acquires and asserts 201; returns the grant.
    pub async fn must_acquire(&self, name: &str, body: Value) -> Value {
        let response = self.acquire(name, body).await;
        assert_eq!(response.status(), StatusCode::CREATED, "acquire {name}");
        response.json().await.expect("grant is JSON")
    }

    pub async fn heartbeat(&self, name: &str, holder: &str, body: Value) -> Response {
        self.post(&format!("/locks/{name}/holders/{holder}/heartbeat"), body)
            .await
    }

    pub async fn release(&self, name: &str, holder: &str) -> Response {
        self.client
            .delete(self.url(&format!("/locks/{name}/holders/{holder}")))
            .send()
            .await
            .expect("request sent")
    }

    pub async fn state(&self, name: &str) -> Value {
        let response = self
            .client
            .get(self.url(&format!("/locks/{name}")))
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status(), StatusCode::OK);
        response.json().await.expect("state is JSON")
    }

    /// Sends a JSON POST in the background (a long-poll that will block).
    pub fn spawn_post(&self, path: &str, body: Value) -> JoinHandle<Response> {
        let request = self.client.post(self.url(path)).json(&body);
        tokio::spawn(async move { request.send().await.expect("request sent") })
    }

    /// `holder` takes the lock for `lease_ms`; then `waiter` long-polls it
    /// for up to `wait_ms` in the background. Returns once the waiter waits.
    pub async fn held_with_waiter(
        &self,
        name: &str,
        (holder, lease_ms): (&str, u64),
        (waiter, wait_ms): (&str, u64),
    ) -> JoinHandle<Response> {
        self.must_acquire(name, json!({"holder": holder, "lease_ms": lease_ms}))
            .await;
        let pending = self.spawn_post(
            &format!("/locks/{name}/acquire"),
            json!({"holder": waiter, "wait_ms": wait_ms}),
        );
        self.wait_for_waiters(name, 1).await;
        pending
    }

    /// Waits until this instance counts `n` requests waiting on the lock.
    pub async fn wait_for_waiters(&self, name: &str, n: u64) {
        let reached = eventually(Duration::from_secs(3), || async {
            self.state(name).await["waiters"] == n
        })
        .await;
        assert!(reached, "expected {n} waiter(s) on {name}");
    }

    pub async fn get_json(&self, path: &str) -> Value {
        let response = self.client.get(self.url(path)).send().await.expect("sent");
        response.json().await.expect("JSON body")
    }

    pub async fn delete_json(&self, path: &str) -> Value {
        let response = self
            .client
            .delete(self.url(path))
            .send()
            .await
            .expect("sent");
        response.json().await.expect("JSON body")
    }

    pub async fn metrics(&self) -> String {
        self.client
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("sent")
            .text()
            .await
            .expect("text")
    }

    /// One sample of a Prometheus metric (the exact series, labels
    /// included). A series the page does not have fails the test, so that
    /// an assertion on a renamed or unregistered series cannot pass by
    /// reading 0; [`Self::metric_or_zero`] is for a labelled series that
    /// appears only once something counted in it.
    pub async fn metric(&self, series: &str) -> f64 {
        self.sample(series)
            .await
            .unwrap_or_else(|| panic!("/metrics has no series {series}"))
    }

    /// [`Self::metric`], or 0 while the page has no such series yet (a
    /// labelled counter nothing has counted in).
    pub async fn metric_or_zero(&self, series: &str) -> f64 {
        self.sample(series).await.unwrap_or(0.0)
    }

    async fn sample(&self, series: &str) -> Option<f64> {
        let text = self.metrics().await;
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .map(|v| v.trim().parse().expect("a number"))
    }
}

/// On the lock-like object at `object` (`/locks/n`, `/rwlocks/n`,
/// `/semaphores/n`, ...): holder `a` acquires by `object/acquire_path`, `b`
/// waits for it and is woken by `a`'s release, heartbeats, reads the state
/// and releases. Returns `a`'s grant. `a`'s lease (30 s) is what `b` would
/// otherwise wait for: a wake within 2 s came through pub/sub.
pub async fn hand_over(app: &TestApp, object: &str, acquire_path: &str) -> Value {
    let acquire = format!("{object}/{acquire_path}");
    let first = app
        .post(&acquire, json!({"holder": "a", "lease_ms": 30000}))
        .await;
    assert_eq!(first.status(), StatusCode::CREATED, "{acquire}");
    let grant = first.json().await.expect("grant is JSON");
    let waiter = app.spawn_post(&acquire, json!({"holder": "b", "wait_ms": 10000}));
    // The waiter's first try is refused; then it waits for a wake.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "{acquire}: the waiter waits");
    let release = |holder: &str| {
        let hold = app.url(&format!("{object}/holders/{holder}"));
        app.client.delete(hold).send()
    };
    let released = Instant::now();
    assert_eq!(release("a").await.expect("sent").status(), StatusCode::OK);
    let woken = waiter.await.expect("waiter");
    assert_eq!(woken.status(), StatusCode::CREATED, "{acquire}");
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "{acquire}: woken after {:?}",
        released.elapsed()
    );
    let heartbeat = app
        .post(&format!("{object}/holders/b/heartbeat"), json!({}))
        .await;
    assert_eq!(heartbeat.status(), StatusCode::OK, "{object} heartbeat");
    let state = app.client.get(app.url(object)).send().await.expect("sent");
    assert_eq!(state.status(), StatusCode::OK, "{object} state");
    assert_eq!(release("b").await.expect("sent").status(), StatusCode::OK);
    grant
}

/// Asserts a problem+json answer with the given status and slug; returns it.
pub async fn assert_problem(response: Response, status: u16, slug: &str) -> Value {
    assert_eq!(response.status().as_u16(), status, "status for {slug}");
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    assert_eq!(
        content_type, "application/problem+json",
        "content type for {slug}"
    );
    let body: Value = response.json().await.expect("problem is JSON");
    assert_eq!(body["type"], json!(format!("/problems/{slug}")), "{body}");
    assert_eq!(body["status"], json!(status), "{body}");
    assert!(
        body["title"].as_str().is_some_and(|t| !t.is_empty()),
        "{body}"
    );
    assert!(
        body["detail"].as_str().is_some_and(|d| !d.is_empty()),
        "{body}"
    );
    body
}

/// A store on the test Redis with the key prefix `t:`, for testing the
/// primitives and their scripts below HTTP.
pub async fn test_store(redis: &RedisServer) -> latchkey::store::Store {
    let config = latchkey::store::StoreConfig {
        mode: latchkey::config::RedisMode::Standalone,
        urls: vec![redis.url()],
        sentinel_master: String::new(),
        prefix: "t:".into(),
        pool_size: 2,
        connect_timeout: Duration::from_millis(500),
        response_timeout: Duration::from_millis(1000),
        min_replicas: 0,
        tls: Default::default(),
    };
    let metrics = latchkey::metrics::Metrics::new();
    latchkey::store::Store::open(&config, metrics)
        .await
        .unwrap()
}

/// A connection to the test Redis as its default user (over TLS for a
/// TLS server), for inspecting and tampering.
pub async fn redis_conn(redis: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .expect("connect to test redis")
}

/// Whether `redis`'s `INFO <section>` satisfies `check` within 10 s.
pub async fn info_within(redis: &RedisServer, section: &str, check: fn(&str) -> bool) -> bool {
    let conn = redis_conn(redis).await;
    eventually(Duration::from_secs(10), || {
        let mut conn = conn.clone();
        async move {
            let info: String = redis::cmd("INFO")
                .arg(section)
                .query_async(&mut conn)
                .await
                .unwrap_or_default();
            check(&info)
        }
    })
    .await
}

/// Whether `master` has a replica in sync within 10 s.
pub async fn replica_in_sync(master: &RedisServer) -> bool {
    info_within(master, "replication", |info| {
        info.contains("connected_slaves:1") && info.contains("state=online")
    })
    .await
}

/// Reads a Server-Sent Events response into `(event, data)` pairs until
/// the stream ends (comments and keep-alives are skipped).
pub async fn read_sse(response: Response) -> Vec<(String, Value)> {
    let mut events = sse_events(response);
    let mut all = Vec::new();
    while let Some(event) = events.recv().await {
        all.push(event);
    }
    all
}

/// The `(event, data)` pairs of a Server-Sent Events response as they
/// arrive (the channel closes when the stream ends).
pub fn sse_events(response: Response) -> tokio::sync::mpsc::UnboundedReceiver<(String, Value)> {
    use futures_util::StreamExt;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = response.bytes_stream();
        let mut buffer = String::new();
        while let Some(chunk) = stream.next().await {
            buffer.push_str(&String::from_utf8_lossy(&chunk.expect("stream chunk")));
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                let mut name = String::from("message");
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        name = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if !data.is_empty() {
                    let data = serde_json::from_str(&data).expect("event data is JSON");
                    let _ = tx.send((name, data));
                }
            }
        }
    });
    rx
}

/// Polls `check` until it returns true or `within` passes.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    loop {
        if check().await {
            return true;
        }
        if started.elapsed() > within {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The encoding Redis keeps `key` in (`OBJECT ENCODING`).
pub async fn object_encoding(redis: &RedisServer, key: &str) -> String {
    let mut conn = redis_conn(redis).await;
    redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// Waits until the binary listening on `base` answers `/readyz` 200
/// (at most 10 s); whether it did.
pub async fn binary_ready(client: &reqwest::Client, base: &str) -> bool {
    eventually(Duration::from_secs(10), || async {
        let ready = client.get(format!("{base}/readyz")).send().await;
        ready.is_ok_and(|r| r.status() == 200)
    })
    .await
}

/// Starts the real binary against `redis_url` with extra variables;
/// returns the child (stdout piped: its JSON log) and its port.
pub fn start_binary(redis_url: &str, env: &[(&str, &str)]) -> (std::process::Child, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_latchkey"))
        .env("LATCHKEY_REDIS_URL", redis_url)
        .env("LATCHKEY_LISTEN", format!("127.0.0.1:{port}"))
        .env("LATCHKEY_SHUTDOWN_GRACE_MS", "3000")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("latchkey binary starts");
    (child, port)
}

/// [`start_binary`], answering `/readyz`: the child, its base URL and a
/// client.
pub async fn ready_binary(
    redis_url: &str,
    env: &[(&str, &str)],
) -> (std::process::Child, String, reqwest::Client) {
    let (child, port) = start_binary(redis_url, env);
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    assert!(binary_ready(&client, &base).await, "the binary is ready");
    (child, base, client)
}

/// Kills a binary from [`start_binary`] and returns all it logged.
pub fn log_when_killed(child: &mut std::process::Child) -> String {
    use std::io::Read;
    child.kill().unwrap();
    let mut log = String::new();
    (child.stdout.take().unwrap().read_to_string(&mut log)).unwrap();
    child.wait().unwrap();
    log
}

/// What the binary logs from its start until it listens; it is then killed.
pub fn start_up_log(redis_url: &str, env: &[(&str, &str)]) -> Vec<String> {
    use std::io::{BufRead, BufReader};
    let (mut child, _) = start_binary(redis_url, env);
    let lines = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map(|l| l.unwrap())
        .take_while(|l| !l.contains("latchkey listening"))
        .collect();
    child.kill().unwrap();
    child.wait().unwrap();
    lines
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, made
/// by the `openssl` command in a temporary directory (removed on drop).
/// The server certificate is also good for client authentication: a TLS
/// server shows it to its master, its cluster bus peers, and a Sentinel to
/// the masters it watches.
pub struct TestPki {
    dir: PathBuf,
}

impl TestPki {
    pub fn generate() -> TestPki {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("latchkey-pki-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("PKI directory");
        let pki = TestPki { dir };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        pki.openssl(&[
            &["req", "-x509", "-new", "-days", "2"],
            &ec[..],
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-subj",
                "/CN=latchkey test CA",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        ]);
        for (who, usage, serial) in [
            (
                "server",
                "serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1",
                "1",
            ),
            ("client", "clientAuth", "2"),
        ] {
            let ext = format!(
                "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage={usage}\n"
            );
            std::fs::write(pki.path(&format!("{who}.ext")), ext).expect("extensions file");
            let subject = format!("/CN=latchkey test {who}");
            pki.openssl(&[
                &["req", "-new"],
                &ec[..],
                &[
                    "-keyout",
                    &format!("{who}.key"),
                    "-out",
                    &format!("{who}.csr"),
                    "-subj",
                    &subject,
                ],
            ]);
            pki.openssl(&[&[
                "x509",
                "-req",
                "-days",
                "2",
                "-in",
                &format!("{who}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-set_serial",
                serial,
                "-extfile",
                &format!("{who}.ext"),
                "-out",
                &format!("{who}.pem"),
            ]]);
        }
        pki
    }

    fn openssl(&self, args: &[&[&str]]) {
        let output = Command::new("openssl")
            .args(args.concat())
            .current_dir(&self.dir)
            .output()
            .expect("openssl runs (package openssl)");
        assert!(
            output.status.success(),
            "openssl {:?}: {}",
            args.concat(),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// TLS for a test server; with `auth_clients` it refuses clients
    /// without a certificate from the CA.
    pub fn server(&self, auth_clients: bool) -> ServerTls {
        ServerTls {
            ca: self.path("ca.pem"),
            cert: self.path("server.pem"),
            key: self.path("server.key"),
            client_cert: self.path("client.pem"),
            client_key: self.path("client.key"),
            auth_clients,
        }
    }

    /// `config` trusting the test CA, and showing the client certificate
    /// when `client_cert`.
    pub fn trusted_by(&self, config: Config, client_cert: bool) -> Config {
        let file = |name: &str| client_cert.then(|| self.path(name));
        Config {
            redis_tls_ca_file: Some(self.path("ca.pem")),
            redis_tls_cert_file: file("client.pem"),
            redis_tls_key_file: file("client.key"),
            ..config
        }
    }
}

impl Drop for TestPki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A TCP proxy in front of a Redis server that delays every byte by
/// `delay` each way: a slower path to Redis for one app instance (point
/// its `redis_urls` at [`DelayProxy::url`]). Dropped, it stops accepting;
/// its connections end with their clients.
pub struct DelayProxy {
    port: u16,
    accepting: JoinHandle<()>,
}

impl DelayProxy {
    pub async fn start(upstream: u16, delay: Duration) -> DelayProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        let port = listener.local_addr().expect("bound").port();
        let accepting = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let Ok(outbound) =
                        tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                    else {
                        return;
                    };
                    let (from_client, to_client) = inbound.into_split();
                    let (from_redis, to_redis) = outbound.into_split();
                    tokio::join!(
                        delayed(from_client, to_redis, delay),
                        delayed(from_redis, to_client, delay)
                    );
                });
            }
        });
        DelayProxy { port, accepting }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// Copies `from` to `to`, each chunk `delay` after it was read (the order
/// kept, the throughput not limited).
async fn delayed(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let read = async move {
        let mut buffer = vec![0; 16 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buffer).await {
            let due = tokio::time::Instant::now() + delay;
            if tx.send((due, buffer[..n].to_vec())).is_err() {
                return;
            }
        }
    };
    let write = async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
    };
    tokio::join!(read, write);
}

/// `CONFIG RESETSTAT`: the counts [`commands_called`] reads start again.
pub async fn reset_command_stats(conn: &mut redis::aio::MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await
        .unwrap();
}

/// The calls of each Redis command (`INFO commandstats`, names in lower
/// case) since the last `CONFIG RESETSTAT`.
pub async fn commands_called(
    conn: &mut redis::aio::MultiplexedConnection,
) -> std::collections::BTreeMap<String, u64> {
    commandstats(conn, &["calls"]).await
}

/// How many times `command` was sent to Redis since the last
/// `CONFIG RESETSTAT`: run, or refused before it ran (out of memory, say;
/// Redis counts those apart from its calls, as `rejected_calls`).
pub async fn command_sent(conn: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let sent = commandstats(conn, &["calls", "rejected_calls"]).await;
    sent.get(command).copied().unwrap_or(0)
}

/// Each Redis command's `INFO commandstats` counters named in `counters`,
/// summed.
async fn commandstats(
    conn: &mut redis::aio::MultiplexedConnection,
    counters: &[&str],
) -> std::collections::BTreeMap<String, u64> {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    stats
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .map(|l| {
            let (name, rest) = l.split_once(':').expect("a commandstats line");
            let count = (rest.split(','))
                .filter_map(|field| field.split_once('='))
                .filter(|(counter, _)| counters.contains(counter))
                .map(|(_, n)| n.trim().parse::<u64>().unwrap())
                .sum();
            (name.to_string(), count)
        })
        .collect()
}

/// The function libraries on `redis` whose names start with `prefix`.
pub async fn libraries(redis: &RedisServer, prefix: &str) -> Vec<String> {
    let reply: redis::Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg(format!("{prefix}*"))
        .query_async(&mut redis_conn(redis).await)
        .await
        .unwrap();
    let redis::Value::Array(libraries) = reply else {
        panic!("FUNCTION LIST: {reply:?}");
    };
    libraries
        .iter()
        .map(|library| match library {
            redis::Value::Array(pairs) => match &pairs[1] {
                redis::Value::BulkString(name) => String::from_utf8(name.clone()).unwrap(),
                other => panic!("library_name {other:?}"),
            },
            other => panic!("library {other:?}"),
        })
        .collect()
}

/// `FUNCTION FLUSH` on `redis`: it loses every function library, as after
/// a restart without persistence.
pub async fn flush_functions(redis: &RedisServer) {
    let flushed: String = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut redis_conn(redis).await)
        .await
        .unwrap();
    assert_eq!(flushed, "OK");
}

/// The scripts Redis ran since the last `CONFIG RESETSTAT`: `FCALL`s of
/// their function libraries and `EVALSHA`s (where Redis refuses
/// functions).
pub async fn script_calls(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let called = commands_called(conn).await;
    ["fcall", "evalsha"]
        .iter()
        .filter_map(|c| called.get(*c))
        .sum()
}

/// Redis's clock in ms, read with TIME.
pub async fn redis_ms(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    secs * 1000 + micros / 1000
}

/// The calls of one Redis command since the last `CONFIG RESETSTAT`.
pub async fn command_calls(conn: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    (commands_called(conn).await)
        .get(command)
        .copied()
        .unwrap_or(0)
}
