//! The only code that talks to Redis.
//!
//! - [`Store`]: shared multiplexed connections with explicit timeouts, the Lua scripts
//!   (one atomic script per state change), and the key layout. Every call
//!   has one budget, the response timeout, from its start: getting a
//!   connection, the script (and its reload after a Redis restart), a
//!   repeat on a fresh connection and the replicas' acknowledgement all
//!   fit in it, so a stalled Redis costs a request at most that long.
//! - [`pubsub::Hub`]: one dedicated subscriber connection per process that
//!   fans notifications out to in-process waiters.
//! - [`backend`]: standalone, Sentinel and Cluster behind one type;
//!   [`connector`]: where a new connection goes (a Sentinel lookup, the
//!   Cluster's nodes), shared by the pool and the pub/sub hub;
//!   [`tls`]: the CA and client certificate of `rediss://` connections.
//!
//! Key layout: `{prefix}{<name>}:<part>`. Every key and channel of one
//! object shares the hash tag `{<name>}`, so each script touches a single
//! Redis Cluster slot. Names never contain braces (the book's "Locks"
//! (docs/src/locks.md) gives the allowed characters).

pub mod backend;
pub mod connector;
pub mod pool;
pub mod pubsub;
pub mod scan;
pub mod scripts;
pub mod tls;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use redis::{FromRedisValue, Value};

use crate::config::{Config, ConfigError, RedisMode};
use crate::metrics::Metrics;
use backend::{Backend, Conn};
use connector::Connector;
pub use scripts::{Library, Publish, Script};
use tls::RedisTls;

/// Why a Redis call failed, as the HTTP layer needs to know it. Every
/// variant is a backend condition (503), never an internal error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// Redis can't serve right now: unreachable, too slow, or refusing
    /// (out of memory, loading, read-only replica, ...). `detail` is for
    /// the log only.
    Unavailable {
        condition: Condition,
        detail: String,
    },
    /// The write happened, but fewer than `min_replicas` acknowledged it.
    ReplicasLagging { acked: u32, wanted: u32 },
    /// Redis answered something no script returns (someone else wrote our
    /// keys with another type, or a bug). Retrying does not help.
    Unexpected(String),
}

/// The backend conditions a client is told about, in plain words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    Unreachable,
    Timeout,
    OutOfMemory,
    Busy,
    Misconfigured,
    Unauthorized,
    Loading,
    ReadOnly,
    MasterDown,
    ClusterDown,
    NoReplicas,
    Rejected,
    /// Too few RedLock nodes answered in time for a quorum (RedLock only;
    /// the nodes are not the main Redis).
    NoQuorum,
}

impl Condition {
    /// What the client is told (no internals).
    pub fn describe(self) -> &'static str {
        match self {
            Condition::Unreachable => "Redis cannot be reached",
            Condition::Timeout => "Redis did not answer in time",
            Condition::OutOfMemory => {
                "Redis is out of memory (maxmemory reached) and refuses writes"
            }
            Condition::Busy => "Redis is busy running a long script",
            Condition::Misconfigured => "Redis refuses writes because it cannot persist its data",
            Condition::Unauthorized => "Redis rejected the service's credentials or permissions",
            Condition::Loading => "Redis is loading its dataset",
            Condition::ReadOnly => {
                "the Redis server is a read-only replica (a failover may be under way)"
            }
            Condition::MasterDown => "the Redis replica has lost its master",
            Condition::ClusterDown => "the Redis Cluster is down or resharding",
            Condition::NoReplicas => "not enough Redis replicas are connected",
            Condition::Rejected => "Redis rejected a command",
            Condition::NoQuorum => "too few RedLock nodes answered in time for a quorum",
        }
    }

    /// From the error code of a Redis error reply.
    fn from_code(code: &str) -> Self {
        match code {
            "OOM" => Condition::OutOfMemory,
            "BUSY" => Condition::Busy,
            "MISCONF" => Condition::Misconfigured,
            "NOAUTH" | "WRONGPASS" | "NOPERM" => Condition::Unauthorized,
            "LOADING" => Condition::Loading,
            "READONLY" => Condition::ReadOnly,
            "MASTERDOWN" => Condition::MasterDown,
            "TRYAGAIN" | "CLUSTERDOWN" => Condition::ClusterDown,
            "NOREPLICAS" => Condition::NoReplicas,
            _ => Condition::Rejected,
        }
    }

    /// Metrics label.
    fn kind(self) -> &'static str {
        match self {
            Condition::Unreachable => "io",
            Condition::Timeout => "timeout",
            Condition::Rejected => "server",
            _ => "unavailable",
        }
    }
}

impl StoreError {
    /// A script answered with a shape its caller does not expect.
    pub fn reply(script: &str, reply: &[Value]) -> StoreError {
        StoreError::Unexpected(format!("{script} returned {reply:?}"))
    }

    /// A call that did not get its answer in time.
    pub fn timeout() -> Self {
        StoreError::Unavailable {
            condition: Condition::Timeout,
            detail: "no answer within the time left".into(),
        }
    }

    /// Whether trying again later can succeed (waits retry these).
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Unavailable { condition, .. } => {
                !matches!(condition, Condition::Unauthorized | Condition::Rejected)
            }
            StoreError::ReplicasLagging { .. } => true,
            StoreError::Unexpected(_) => false,
        }
    }

    /// Whether the command may have run on Redis although the caller got
    /// no answer (a grant made this way must be given back).
    pub fn outcome_unknown(&self) -> bool {
        match self {
            StoreError::Unavailable { condition, .. } => {
                matches!(condition, Condition::Unreachable | Condition::Timeout)
            }
            StoreError::ReplicasLagging { .. } => true,
            StoreError::Unexpected(_) => false,
        }
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Unavailable { condition, detail } => {
                write!(f, "{}: {detail}", condition.describe())
            }
            StoreError::ReplicasLagging { acked, wanted } => {
                write!(
                    f,
                    "only {acked} of {wanted} replicas acknowledged the write"
                )
            }
            StoreError::Unexpected(s) => write!(f, "unexpected redis reply: {s}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// The failure of one command, with what the store needs to decide about
/// the connection it ran on.
fn condition_of(err: &redis::RedisError) -> Condition {
    // A refused AUTH is also "unrecoverable" (reconnect) to the redis crate.
    if err.kind() == redis::ErrorKind::AuthenticationFailed {
        return Condition::Unauthorized;
    }
    if err.is_timeout() {
        return Condition::Timeout;
    }
    if err.is_io_error() || err.is_connection_dropped() || err.is_unrecoverable_error() {
        return Condition::Unreachable;
    }
    if let Some(code) = err.code() {
        return Condition::from_code(code);
    }
    // Errors raised inside a script may carry the code further in.
    let text = err.to_string();
    ["OOM", "BUSY", "MISCONF", "NOPERM", "READONLY", "LOADING"]
        .into_iter()
        .find(|code| text.contains(&format!("{code} ")))
        .map_or(Condition::Rejected, Condition::from_code)
}

/// Settings the store needs, taken from [`Config`].
#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub mode: RedisMode,
    /// One URL (standalone), Sentinel URLs, or Cluster seed node URLs.
    pub urls: Vec<String>,
    pub sentinel_master: String,
    pub prefix: String,
    pub pool_size: usize,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    pub min_replicas: u32,
    /// The CA and client certificate for `rediss://` URLs.
    pub tls: RedisTls,
}

impl StoreConfig {
    /// The main Redis's settings; reads the TLS files (see [`tls`]).
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        Ok(StoreConfig {
            tls: config.redis_tls()?,
            mode: config.redis_mode,
            urls: config.redis_urls.clone(),
            sentinel_master: config.sentinel_master.clone(),
            prefix: config.key_prefix.clone(),
            pool_size: config.redis_pool_size,
            connect_timeout: config.redis_connect_timeout(),
            response_timeout: config.redis_response_timeout(),
            min_replicas: config.min_replicas,
        })
    }
}

/// Cheap to clone: one `Arc` inside.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    /// Connections for requests (shared multiplexed, dedicated, or cluster).
    backend: Backend,
    /// Where the pub/sub hub's own connection goes.
    connector: Connector,
    /// Prefix of every key and channel.
    prefix: String,
    /// Error counters and script latency.
    metrics: Metrics,
    /// Replicas that must acknowledge each write (`WAIT`), 0 = don't wait.
    min_replicas: u32,
    /// The budget of one call, from its start to its answer.
    response_timeout: Duration,
    /// `WAIT` timeout: half the response timeout (at most what is left of
    /// the call's budget), so the WAIT reply itself arrives in time.
    wait_timeout_ms: u64,
    /// Redis Cluster: keys of different names may live on different nodes.
    cluster: bool,
    /// Whether calls go to the scripts' function libraries (`FCALL`);
    /// false once Redis refused functions (no `FUNCTION` command, or a
    /// user that may not use it): then every call is an `EVALSHA`.
    functions: AtomicBool,
    /// Until when a call whose library is missing runs its script without
    /// sending `FUNCTION LOAD` first: Redis refused one because it refuses
    /// writes (out of memory, say), and would refuse the next as well.
    loads_paused_until: parking_lot::Mutex<Option<Instant>>,
}

/// How long after Redis refused a library because it refuses writes no
/// call sends one: each is tens of kilobytes, which a call whose library
/// is missing would otherwise send, for nothing, while Redis is full.
/// (One pause for the store: on a Cluster, one full node's refusal pauses
/// the loads to every node, whose calls run their scripts meanwhile.)
const LOAD_PAUSE: Duration = Duration::from_secs(1);

/// How a call may be repeated when its connection fails under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    /// A read: repeat once on a fresh connection.
    Read,
    /// A state change that is safe to run twice (its attempt id makes the
    /// second run return the first one's result): repeat once.
    Repeatable,
    /// A state change that must run at most once (release).
    Once,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("prefix", &self.inner.prefix)
            .finish()
    }
}

impl Store {
    /// Prepares the connections and tries to load every script. Redis
    /// being down at start is not fatal: requests answer 503 and `/readyz`
    /// says not ready until it comes back; scripts are then loaded on first
    /// use (a missing function, or NOSCRIPT).
    pub async fn open(cfg: &StoreConfig, metrics: Metrics) -> Result<Store, String> {
        let (backend, connector) = backend::open(&backend::Target {
            mode: cfg.mode,
            urls: &cfg.urls,
            tls: &cfg.tls,
            sentinel_master: &cfg.sentinel_master,
            connections: cfg.pool_size,
            connect_timeout: cfg.connect_timeout,
            response_timeout: cfg.response_timeout,
            dedicated_writes: cfg.min_replicas > 0,
        })?;
        let store = Store {
            inner: Arc::new(Inner {
                backend,
                connector,
                prefix: cfg.prefix.clone(),
                metrics,
                min_replicas: cfg.min_replicas,
                response_timeout: cfg.response_timeout,
                wait_timeout_ms: (cfg.response_timeout.as_millis() as u64 / 2).max(1),
                cluster: cfg.mode == RedisMode::Cluster,
                functions: AtomicBool::new(true),
                loads_paused_until: parking_lot::Mutex::new(None),
            }),
        };
        if let Err(e) = store.load_scripts().await {
            tracing::warn!(error = %e, "could not load Lua scripts at start; will retry on use");
        }
        Ok(store)
    }

    /// Where the dedicated pub/sub connection should connect.
    pub fn connector(&self) -> Connector {
        self.inner.connector.clone()
    }

    /// True on Redis Cluster, where one script cannot reach the keys of
    /// several names (each name's keys share one slot, different names
    /// usually do not).
    pub fn spans_nodes(&self) -> bool {
        self.inner.cluster
    }

    /// Which variant of the scripts this deployment runs: sharded pub/sub
    /// on a Redis Cluster, classic otherwise (see [`scripts`]).
    pub fn publish(&self) -> Publish {
        if self.inner.cluster {
            Publish::Sharded
        } else {
            Publish::Classic
        }
    }

    /// `{prefix}{<name>}:<part>`.
    pub fn key(&self, name: &str, part: &str) -> String {
        self.key_of(name, &[part])
    }

    /// `{prefix}{<name>}:` followed by `parts`, built in one allocation
    /// (several keys are named for every script call). A namespaced name,
    /// `<namespace>/<name>` (a name never holds a `/`), is keyed
    /// `{prefix}<namespace>:{<name>}:…`: the namespace prefixes every key
    /// and channel of its objects (the book's "API keys and namespaces"
    /// (docs/src/api-keys.md)).
    pub fn key_of(&self, name: &str, parts: &[&str]) -> String {
        let prefix = &self.inner.prefix;
        let (namespace, name) = match name.split_once('/') {
            Some((namespace, name)) => (namespace, name),
            None => ("", name),
        };
        let len = prefix.len()
            + namespace.len()
            + name.len()
            + 4
            + parts.iter().map(|p| p.len()).sum::<usize>();
        let mut key = String::with_capacity(len);
        key.push_str(prefix);
        if !namespace.is_empty() {
            key.push_str(namespace);
            key.push(':');
        }
        key.push('{');
        key.push_str(name);
        key.push_str("}:");
        parts.iter().for_each(|p| key.push_str(p));
        key
    }

    /// The pub/sub pattern that covers every channel of this deployment.
    pub fn channel_pattern(&self) -> String {
        format!("{}*", self.inner.prefix)
    }

    /// Runs `work`, several calls one after another, within one response
    /// timeout, as a request that does not wait must answer: past it,
    /// [`StoreError::timeout`] (as `E`). A call cut short is as one whose
    /// reply was lost: each caller's work is safe to repeat.
    pub async fn within_response_timeout<T, E: From<StoreError>>(
        &self,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        (tokio::time::timeout(self.inner.response_timeout, work).await)
            .unwrap_or_else(|_| Err(E::from(StoreError::timeout())))
    }

    /// When a call starting now must have its answer.
    fn deadline(&self) -> Instant {
        Instant::now() + self.inner.response_timeout
    }

    /// A connection, by `deadline` (connecting, a Sentinel lookup or a
    /// Cluster's topology discovery included).
    async fn conn(
        &self,
        deadline: Instant,
        dedicated: bool,
        replacing: Option<&Conn>,
    ) -> Result<Conn, StoreError> {
        // The common case first, without the future below: boxing it copies
        // the whole (large) connect future to the heap, and that copy was
        // about a tenth of the service's instructions per request.
        if let Some(conn) = self.inner.backend.ready(dedicated, replacing) {
            return Ok(conn);
        }
        // Type-erased: the connection futures (cluster discovery, Sentinel
        // lookups) are deep enough to overflow rustc's trait and layout
        // queries when nested in every handler's future.
        let get: BoxFuture<'_, redis::RedisResult<Conn>> =
            Box::pin(self.inner.backend.get(dedicated, replacing));
        let Ok(got) = tokio::time::timeout_at(deadline.into(), get).await else {
            // Connected (the kernel accepts) but unanswered: a stalled server.
            self.count_error("timeout");
            return Err(StoreError::Unavailable {
                condition: Condition::Timeout,
                detail: "no connection to Redis within the call's budget".into(),
            });
        };
        got.map_err(|e| {
            self.count_error("pool");
            // Refused credentials or permissions (the login, a Sentinel
            // lookup) say so; anything else is a server out of reach.
            let condition = match condition_of(&e) {
                Condition::Unauthorized => Condition::Unauthorized,
                _ => Condition::Unreachable,
            };
            StoreError::Unavailable {
                condition,
                detail: e.to_string(),
            }
        })
    }

    /// `command` on `conn`, by `deadline`: past it, the command counts as
    /// timed out (and [`Store::fail`] drops the connection).
    async fn by<T>(
        deadline: Instant,
        command: impl Future<Output = redis::RedisResult<T>>,
    ) -> redis::RedisResult<T> {
        tokio::time::timeout_at(deadline.into(), command)
            .await
            .unwrap_or_else(|_| {
                Err(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no answer within the call's budget (the response timeout)",
                )))
            })
    }

    fn count_error(&self, kind: &str) {
        self.inner
            .metrics
            .redis_errors
            .with_label_values(&[kind])
            .inc();
    }

    /// Turns a command's failure into a [`StoreError`], and stops using a
    /// connection that may be half-broken (I/O error, timeout) or points at
    /// a demoted master.
    fn fail(&self, conn: &mut Conn, err: redis::RedisError) -> StoreError {
        let condition = condition_of(&err);
        self.count_error(condition.kind());
        if matches!(
            condition,
            Condition::Unreachable | Condition::Timeout | Condition::ReadOnly
        ) {
            self.inner.backend.discard(conn);
        }
        StoreError::Unavailable {
            condition,
            detail: err.to_string(),
        }
    }

    /// Runs one read-only script (by `FCALL` of its function, else by
    /// `EVALSHA`, loading either when Redis lacks it) and decodes its
    /// reply. Repeated once on a fresh connection if the one it
    /// used turns out to be dead.
    pub async fn run<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &[impl AsRef<str> + Sync],
        args: &[impl AsRef<str> + Sync],
    ) -> Result<T, StoreError> {
        self.call(script, keys, args, Call::Read).await
    }

    /// Like [`Store::run`] for a script that changes state and must run at
    /// most once: with `min_replicas > 0` it then waits (`WAIT`) for that
    /// many replicas to acknowledge, and reports
    /// [`StoreError::ReplicasLagging`] otherwise.
    pub async fn write<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &[impl AsRef<str> + Sync],
        args: &[impl AsRef<str> + Sync],
    ) -> Result<T, StoreError> {
        self.call(script, keys, args, Call::Once).await
    }

    /// [`Store::write`] for a script that is safe to run twice (an acquire
    /// carrying its attempt id, a renewal, an undo): repeated once on a
    /// fresh connection if the one it used turns out to be dead.
    pub async fn write_repeatable<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &[impl AsRef<str> + Sync],
        args: &[impl AsRef<str> + Sync],
    ) -> Result<T, StoreError> {
        self.call(script, keys, args, Call::Repeatable).await
    }

    async fn call<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &[impl AsRef<str> + Sync],
        args: &[impl AsRef<str> + Sync],
        call: Call,
    ) -> Result<T, StoreError> {
        let deadline = self.deadline();
        let replicated = call != Call::Read && self.inner.min_replicas > 0;
        let mut conn = self.conn(deadline, replicated, None).await?;
        let mut result = Self::by(deadline, self.invoke(&mut conn, script, keys, args)).await;
        if let Err(e) = &result
            && call != Call::Once
            && !e.is_timeout()
            && (e.is_io_error() || e.is_connection_dropped() || e.code() == Some("READONLY"))
        {
            // Probably a connection that died while idle (Redis restart,
            // failover, CLIENT KILL): once more on a new one, in the time
            // the call has left.
            self.inner.backend.discard(&mut conn);
            conn = self.conn(deadline, replicated, Some(&conn)).await?;
            result = Self::by(deadline, self.invoke(&mut conn, script, keys, args)).await;
        }
        let value = result.map_err(|e| self.fail(&mut conn, e))?;
        let decoded = T::from_redis_value(value)
            .map_err(|e| StoreError::Unexpected(format!("{}: {e}", script.name())))?;
        if replicated {
            self.wait_for_replicas(deadline, &mut conn).await?;
        }
        Ok(decoded)
    }

    async fn wait_for_replicas(
        &self,
        deadline: Instant,
        conn: &mut Conn,
    ) -> Result<(), StoreError> {
        // WAIT blocks for its timeout on the server: it must answer before
        // the call's budget ends (0 would block forever).
        let left_ms = deadline
            .saturating_duration_since(Instant::now())
            .as_millis() as u64;
        let timeout_ms = self.inner.wait_timeout_ms.min(left_ms * 3 / 4).max(1);
        let mut wait = redis::cmd("WAIT");
        wait.arg(self.inner.min_replicas).arg(timeout_ms);
        let acked: i64 = match Self::by(deadline, wait.query_async(conn)).await {
            Ok(n) => n,
            Err(e) => return Err(self.fail(conn, e)),
        };
        if acked < i64::from(self.inner.min_replicas) {
            self.count_error("replication");
            return Err(StoreError::ReplicasLagging {
                acked: acked.max(0) as u32,
                wanted: self.inner.min_replicas,
            });
        }
        Ok(())
    }

    async fn invoke(
        &self,
        conn: &mut Conn,
        script: &Script,
        keys: &[impl AsRef<str> + Sync],
        args: &[impl AsRef<str> + Sync],
    ) -> Result<Value, redis::RedisError> {
        let started = Instant::now();
        let mut result = None;
        if self.inner.functions.load(Ordering::Relaxed) {
            result = self
                .call_function(conn, script, keys, args)
                .await
                .transpose();
        }
        let result = match result {
            Some(result) => result,
            None => self.call_script(conn, script, keys, args).await,
        };
        self.inner
            .metrics
            .script_duration
            .with_label_values(&[script.name()])
            .observe(started.elapsed().as_secs_f64());
        result
    }

    /// The command that calls `script` by `command` (`FCALL` or `EVALSHA`)
    /// and `name` (the function's, or the script's SHA-1), written straight
    /// into one command buffer.
    fn script_command(
        command: &str,
        name: &str,
        keys: &[impl AsRef<str> + Sync],
        args: &[impl AsRef<str> + Sync],
    ) -> redis::Cmd {
        let len = keys.iter().map(|k| k.as_ref().len()).sum::<usize>()
            + args.iter().map(|a| a.as_ref().len()).sum::<usize>();
        let mut cmd = redis::Cmd::with_capacity(3 + keys.len() + args.len(), 64 + len);
        cmd.arg(command).arg(name).arg(keys.len());
        for key in keys {
            cmd.arg(key.as_ref());
        }
        for arg in args {
            cmd.arg(arg.as_ref());
        }
        cmd
    }

    /// Calls `script`'s function (`FCALL`), loading its library when Redis
    /// lacks it (a restart without persistence, `FUNCTION FLUSH`, a
    /// failover to a node that never had it, a newer instance's clean-up).
    /// `Ok(None)`: Redis did not run it, and will not run functions for
    /// this call (it refused the library, or lost it again at once): the
    /// caller runs the script instead.
    async fn call_function(
        &self,
        conn: &mut Conn,
        script: &Script,
        keys: &[impl AsRef<str> + Sync],
        args: &[impl AsRef<str> + Sync],
    ) -> Result<Option<Value>, redis::RedisError> {
        let library = script.library(self.publish());
        let fcall = Self::script_command("FCALL", &library.name, keys, args);
        match fcall.query_async(conn).await {
            Err(e) if function_missing(&e) => {}
            Err(e) if functions_refused(&e) => {
                self.without_functions(&e);
                return Ok(None);
            }
            // Redis refuses a function that may write, whole, where it
            // refuses writes; a script it stops only at its first write,
            // so the script answers what writes nothing (a busy lock's
            // 409, a retried request's recorded answer). Either way
            // nothing was written, so the script may run.
            Err(e) if refused_writes(&e) => return Ok(None),
            other => return other.map(Some),
        }
        if self.loads_paused() {
            return Ok(None);
        }
        if let Err(e) = Self::load_library(conn, library).await {
            // Not loaded (Redis out of memory refuses `FUNCTION LOAD`, a
            // user that may not load it, a Cluster node that did not
            // answer): the function never ran, so the script may. On a
            // connection that died, it fails as the function would have.
            if functions_refused(&e) {
                self.without_functions(&e);
            } else if refused_writes(&e) {
                self.pause_loads();
            }
            return Ok(None);
        }
        match fcall.query_async(conn).await {
            Err(e) if function_missing(&e) || refused_writes(&e) => Ok(None),
            other => other.map(Some),
        }
    }

    /// `FUNCTION LOAD REPLACE` of `library` (on a Cluster, redis-rs sends
    /// it to every master). `REPLACE`: two instances may load the same
    /// library at once, and a name stands for one code.
    async fn load_library(conn: &mut Conn, library: &Library) -> Result<(), redis::RedisError> {
        let mut load = redis::cmd("FUNCTION");
        load.arg("LOAD").arg("REPLACE").arg(&library.code);
        load.query_async::<Value>(conn).await.map(drop)
    }

    /// Whether calls send no `FUNCTION LOAD` now (see [`LOAD_PAUSE`]).
    fn loads_paused(&self) -> bool {
        matches!(*self.inner.loads_paused_until.lock(), Some(until) if Instant::now() < until)
    }

    /// Redis refused a library because it refuses writes: calls send none
    /// for [`LOAD_PAUSE`].
    fn pause_loads(&self) {
        *self.inner.loads_paused_until.lock() = Some(Instant::now() + LOAD_PAUSE);
    }

    /// Stops calling functions: Redis has no `FUNCTION` command (before
    /// Redis 7) or the user may not run `FCALL` or `FUNCTION LOAD`. Every
    /// call is an `EVALSHA` from now on.
    fn without_functions(&self, e: &redis::RedisError) {
        if self.inner.functions.swap(false, Ordering::Relaxed) {
            tracing::warn!(
                error = %e,
                "Redis refuses function libraries (FCALL, FUNCTION LOAD): the scripts run by \
                 EVALSHA instead, which costs Redis more per call. Allow +fcall +function|load \
                 +function|list +function|delete for this user (Redis 7 or later)."
            );
        }
    }

    /// `script` by `EVALSHA`, loading it into Redis's script cache on
    /// NOSCRIPT.
    async fn call_script(
        &self,
        conn: &mut Conn,
        script: &Script,
        keys: &[impl AsRef<str> + Sync],
        args: &[impl AsRef<str> + Sync],
    ) -> Result<Value, redis::RedisError> {
        let redis_script = script.redis(self.publish());
        // The EVALSHA that redis-rs's `ScriptInvocation` sends, byte for
        // byte: the invocation copies every key and argument into a `Vec`
        // of its own first.
        let evalsha = Self::script_command("EVALSHA", redis_script.get_hash(), keys, args);
        let mut result = evalsha.query_async(conn).await;
        if let Err(e) = &result
            && e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
        {
            // Not in Redis's script cache (a restart, `SCRIPT FLUSH`, a
            // failover): load it and call it again, as redis-rs would.
            result = match redis_script.load_async(conn).await {
                Ok(_) => evalsha.query_async(conn).await,
                Err(e) => Err(e),
            };
        }
        result
    }

    /// Loads every script into Redis: as function libraries where Redis
    /// allows them (and deletes the libraries of other versions, see
    /// [`Store::prune_libraries`]), else into its script cache.
    pub async fn load_scripts(&self) -> Result<(), StoreError> {
        // Builds every script and library first: the budget is Redis's.
        std::sync::LazyLock::force(&scripts::ALL);
        let deadline = self.deadline();
        self.load_scripts_by(deadline).await?;
        if self.inner.functions.load(Ordering::Relaxed) {
            self.prune_libraries(deadline).await;
        }
        Ok(())
    }

    async fn load_scripts_by(&self, deadline: Instant) -> Result<(), StoreError> {
        let mut conn = self.conn(deadline, false, None).await?;
        if self.inner.functions.load(Ordering::Relaxed) {
            match Self::by(deadline, self.load_libraries(&mut conn)).await {
                Ok(()) => return Ok(()),
                Err(e) if functions_refused(&e) => self.without_functions(&e),
                // Redis out of memory refuses `FUNCTION LOAD`, not
                // `SCRIPT LOAD`: calls whose library is missing run the
                // scripts meanwhile, so those are what must be loaded.
                Err(e) if e.code().is_some() => {
                    if refused_writes(&e) {
                        self.pause_loads();
                    }
                    tracing::debug!(error = %e, "could not load the function libraries")
                }
                Err(e) => return Err(self.fail(&mut conn, e)),
            }
        }
        for script in scripts::ALL.iter() {
            let mut load = redis::cmd("SCRIPT");
            load.arg("LOAD").arg(script.source(self.publish()));
            let loaded: Result<String, _> = Self::by(deadline, load.query_async(&mut conn)).await;
            loaded.map_err(|e| self.fail(&mut conn, e))?;
        }
        Ok(())
    }

    /// Loads the libraries Redis lacks (by `FUNCTION LIST`; on a Cluster
    /// that is one node's list, and a call that finds its function
    /// missing on another node loads it there).
    async fn load_libraries(&self, conn: &mut Conn) -> Result<(), redis::RedisError> {
        let present = Self::library_names(conn).await?;
        for script in scripts::ALL.iter() {
            let library = script.library(self.publish());
            if !present.contains(&library.name) {
                Self::load_library(conn, library).await?;
            }
        }
        Ok(())
    }

    /// The names of the libraries in Redis whose names start like this
    /// service's ([`scripts::library::PREFIX`]).
    async fn library_names(
        conn: &mut Conn,
    ) -> Result<std::collections::HashSet<String>, redis::RedisError> {
        let mut list = redis::cmd("FUNCTION");
        // A glob pattern.
        list.arg("LIST")
            .arg("LIBRARYNAME")
            .arg(format!("{}*", scripts::library::PREFIX));
        let reply: Value = list.query_async(conn).await?;
        Ok(library_names_of(&reply))
    }

    /// Deletes the libraries of this service's other versions: each
    /// version's are named by their code, and Redis keeps them (persisted
    /// and replicated) until deleted. An instance of another version that
    /// still runs loads its own again on its next call (one
    /// `FUNCTION LOAD` per script); a failure here only leaves them.
    async fn prune_libraries(&self, deadline: Instant) {
        let Ok(mut conn) = self.conn(deadline, false, None).await else {
            return;
        };
        let ours: std::collections::HashSet<&str> = scripts::ALL
            .iter()
            .map(|s| s.library(self.publish()).name.as_str())
            .collect();
        let present = match Self::by(deadline, Self::library_names(&mut conn)).await {
            Ok(present) => present,
            Err(e) => {
                tracing::debug!(error = %e, "could not list Redis function libraries");
                return;
            }
        };
        for name in present.iter().filter(|n| !ours.contains(n.as_str())) {
            let mut delete = redis::cmd("FUNCTION");
            delete.arg("DELETE").arg(name);
            if let Err(e) = Self::by(deadline, delete.query_async::<Value>(&mut conn)).await {
                tracing::debug!(error = %e, library = %name, "could not delete an old function library");
            }
        }
    }

    /// Readiness: Redis answers and every script is loaded (as a library,
    /// or in the script cache); a Redis restart empties both, and this
    /// loads them again.
    pub async fn check_ready(&self) -> Result<(), StoreError> {
        // One budget for the check and the reload.
        let deadline = self.deadline();
        let present = if self.inner.functions.load(Ordering::Relaxed) {
            let mut conn = self.conn(deadline, false, None).await?;
            match Self::by(deadline, Self::library_names(&mut conn)).await {
                Ok(names) => scripts::ALL
                    .iter()
                    .all(|s| names.contains(&s.library(self.publish()).name)),
                Err(e) if functions_refused(&e) => {
                    self.without_functions(&e);
                    false
                }
                Err(e) => return Err(self.fail(&mut conn, e)),
            }
        } else {
            let mut cmd = redis::cmd("SCRIPT");
            cmd.arg("EXISTS");
            for script in scripts::ALL.iter() {
                cmd.arg(script.redis(self.publish()).get_hash());
            }
            let present: Vec<i64> = self.raw_by(deadline, &cmd).await?;
            !present.contains(&0)
        };
        if !present {
            self.load_scripts_by(deadline).await?;
        }
        Ok(())
    }

    /// Warns loudly when Redis may evict keys: an eviction policy other
    /// than `noeviction` can drop a fencing counter (tokens go backwards)
    /// or a hold (two holders). Managed services often forbid `CONFIG`;
    /// then the policy cannot be checked, which is logged too.
    pub async fn check_eviction_policy(&self) {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("GET").arg("maxmemory-policy");
        match self.raw::<Vec<String>>(&cmd).await {
            Ok(reply) => match reply.get(1).map(String::as_str) {
                Some("noeviction") | None => {}
                Some(policy) => tracing::warn!(
                    policy,
                    "Redis maxmemory-policy is {policy}, not noeviction: under memory pressure \
                     Redis may evict fencing counters (tokens go backwards) or holds (two \
                     holders at once). Set maxmemory-policy noeviction on this Redis."
                ),
            },
            Err(e) => tracing::info!(
                error = %e,
                "could not read Redis maxmemory-policy; make sure it is noeviction"
            ),
        }
    }

    /// Sends one raw command (readiness, start-up checks, tests and the
    /// benchmark; primitives never do).
    pub async fn raw<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, StoreError> {
        self.raw_by(self.deadline(), cmd).await
    }

    async fn raw_by<T: FromRedisValue>(
        &self,
        deadline: Instant,
        cmd: &redis::Cmd,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn(deadline, false, None).await?;
        let value: Value = Self::by(deadline, cmd.query_async(&mut conn))
            .await
            .map_err(|e| self.fail(&mut conn, e))?;
        T::from_redis_value(value).map_err(|e| StoreError::Unexpected(e.to_string()))
    }
}

/// Redis answered `FCALL` that it has no such function.
fn function_missing(e: &redis::RedisError) -> bool {
    e.code() == Some("ERR") && e.detail().is_some_and(|d| d.contains("Function not found"))
}

/// Redis refuses writes: out of memory (`maxmemory` under
/// `noeviction`), too few replicas (`min-replicas-to-write`), or a failed
/// save (`stop-writes-on-bgsave-error`). A script or function meets it
/// before its first write or never.
fn refused_writes(e: &redis::RedisError) -> bool {
    matches!(e.code(), Some("OOM" | "NOREPLICAS" | "MISCONF"))
}

/// Redis refuses functions themselves: it has no `FUNCTION` or `FCALL`
/// (before Redis 7), or the user may not run them (ACL). A script that
/// runs a command the user may not run is refused by that command's name,
/// which is neither.
fn functions_refused(e: &redis::RedisError) -> bool {
    let detail = e.detail().unwrap_or_default().to_ascii_lowercase();
    let names_functions = detail.contains("'fcall'") || detail.contains("'function");
    match e.code() {
        Some("NOPERM") => names_functions,
        Some("ERR") => detail.contains("unknown command") && names_functions,
        _ => false,
    }
}

/// The library names in a `FUNCTION LIST` reply: a list of libraries,
/// each a map (RESP3) or a flat list of pairs (RESP2) with `library_name`.
fn library_names_of(reply: &Value) -> std::collections::HashSet<String> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let Value::Array(libraries) = reply else {
        return Default::default();
    };
    libraries
        .iter()
        .filter_map(|library| match library {
            Value::Array(pairs) => pairs
                .chunks(2)
                .find(|p| text(&p[0]).as_deref() == Some("library_name"))
                .and_then(|p| p.get(1).and_then(text)),
            Value::Map(pairs) => pairs
                .iter()
                .find(|(k, _)| text(k).as_deref() == Some("library_name"))
                .and_then(|(_, v)| text(v)),
            _ => None,
        })
        .collect()
}

/// Reads an unsigned integer out of a script reply element, which Redis
/// hands back either as an integer or as a bulk string (stored hash fields).
pub fn reply_u64(value: &Value, what: &str) -> Result<u64, StoreError> {
    match value {
        Value::Int(i) if *i >= 0 => Ok(*i as u64),
        Value::BulkString(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| StoreError::Unexpected(format!("{what}: not a number"))),
        Value::SimpleString(s) => s
            .parse()
            .map_err(|_| StoreError::Unexpected(format!("{what}: not a number"))),
        other => Err(StoreError::Unexpected(format!(
            "{what}: unexpected {other:?}"
        ))),
    }
}
