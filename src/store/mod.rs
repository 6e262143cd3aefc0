//! The only code that talks to Redis.
//!
//! - [`Store`]: a connection pool with explicit timeouts, the Lua scripts
//!   (one atomic script per state change), and the key layout.
//! - [`pubsub::Hub`]: one dedicated subscriber connection per process that
//!   fans notifications out to in-process waiters.
//!
//! Key layout: `{prefix}{<name>}:<part>`. Every key and channel of one
//! object shares the hash tag `{<name>}`, so each script touches a single
//! Redis Cluster slot. Names never contain braces (API.md §1).

pub mod backend;
pub mod pool;
pub mod pubsub;
pub mod scripts;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{FromRedisValue, Value};

use crate::config::{Config, RedisMode};
use crate::metrics::Metrics;
use backend::{Backend, Conn, Connector};
pub use scripts::Script;

/// Why a Redis call failed, as the HTTP layer needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// Redis could not be reached or did not answer in time (503).
    Unavailable(String),
    /// The write happened, but fewer than `min_replicas` acknowledged it.
    ReplicasLagging { acked: u32, wanted: u32 },
    /// Redis answered something no script returns (a bug, or someone else
    /// wrote our keys with another type): 500, logged.
    Unexpected(String),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Unavailable(s) => write!(f, "redis unavailable: {s}"),
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
}

impl StoreConfig {
    pub fn from_config(config: &Config) -> Self {
        StoreConfig {
            mode: config.redis_mode,
            urls: config.redis_urls.clone(),
            sentinel_master: config.sentinel_master.clone(),
            prefix: config.key_prefix.clone(),
            pool_size: config.redis_pool_size,
            connect_timeout: config.redis_connect_timeout(),
            response_timeout: config.redis_response_timeout(),
            min_replicas: config.min_replicas,
        }
    }
}

/// Cheap to clone handle on the pool, scripts and pub/sub hub.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Backend,
    connector: Connector,
    prefix: String,
    metrics: Metrics,
    /// Replicas that must acknowledge each write (`WAIT`), 0 = don't wait.
    min_replicas: u32,
    /// `WAIT` timeout: half the response timeout, so the WAIT reply itself
    /// arrives before the connection's response timeout fires.
    wait_timeout_ms: u64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("prefix", &self.inner.prefix)
            .finish()
    }
}

impl Store {
    /// Builds the pool and tries to load every script. Redis being down at
    /// start is not fatal: requests answer 503 and `/readyz` says not ready
    /// until it comes back; scripts are then loaded on first use (NOSCRIPT).
    pub async fn open(cfg: &StoreConfig, metrics: Metrics) -> Result<Store, String> {
        let (backend, connector) = backend::open(&backend::Target {
            mode: cfg.mode,
            urls: &cfg.urls,
            sentinel_master: &cfg.sentinel_master,
            pool_size: cfg.pool_size,
            connect_timeout: cfg.connect_timeout,
            response_timeout: cfg.response_timeout,
        })?;
        let store = Store {
            inner: Arc::new(Inner {
                backend,
                connector,
                prefix: cfg.prefix.clone(),
                metrics,
                min_replicas: cfg.min_replicas,
                wait_timeout_ms: (cfg.response_timeout.as_millis() as u64 / 2).max(1),
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

    /// `{prefix}{<name>}:<part>`.
    pub fn key(&self, name: &str, part: &str) -> String {
        format!("{}{{{}}}:{}", self.inner.prefix, name, part)
    }

    /// The pub/sub pattern that covers every channel of this deployment.
    pub fn channel_pattern(&self) -> String {
        format!("{}*", self.inner.prefix)
    }

    async fn conn(&self) -> Result<Conn, StoreError> {
        // Boxed: the cluster connection's creation future is deep enough
        // to overflow rustc's layout query limit in release builds when
        // nested in our async fns.
        Box::pin(self.inner.backend.get()).await.map_err(|e| {
            self.inner
                .metrics
                .redis_errors
                .with_label_values(&["pool"])
                .inc();
            StoreError::Unavailable(e)
        })
    }

    fn classify(&self, conn: &mut Conn, err: redis::RedisError) -> StoreError {
        // Replies that mean "this server can't take writes right now":
        // a demoted master after failover, a loading or split cluster.
        let unavailable_reply = matches!(
            err.code(),
            Some("READONLY" | "MASTERDOWN" | "LOADING" | "TRYAGAIN" | "CLUSTERDOWN" | "NOREPLICAS")
        );
        let kind = if err.is_timeout() {
            "timeout"
        } else if err.is_io_error() || err.is_connection_dropped() || err.is_unrecoverable_error() {
            "io"
        } else if unavailable_reply {
            "unavailable"
        } else {
            "server"
        };
        self.inner
            .metrics
            .redis_errors
            .with_label_values(&[kind])
            .inc();
        if kind == "server" {
            StoreError::Unexpected(err.to_string())
        } else {
            // The connection may be half-broken: never hand it out again.
            conn.mark_broken();
            StoreError::Unavailable(err.to_string())
        }
    }

    /// Runs one read-only script by EVALSHA (loading it on NOSCRIPT) and
    /// decodes its reply.
    pub async fn run<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<T, StoreError> {
        self.call(script, keys, args, false).await
    }

    /// Like [`Store::run`] for a script that changes state: with
    /// `min_replicas > 0` it then waits (`WAIT`) for that many replicas to
    /// acknowledge, and reports [`StoreError::ReplicasLagging`] otherwise.
    pub async fn write<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<T, StoreError> {
        self.call(script, keys, args, true).await
    }

    async fn call<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
        is_write: bool,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn().await?;
        let value = self.invoke(&mut conn, script, keys, args).await?;
        let decoded = T::from_redis_value(value)
            .map_err(|e| StoreError::Unexpected(format!("{}: {e}", script.name())))?;
        if is_write && self.inner.min_replicas > 0 {
            let acked: i64 = match redis::cmd("WAIT")
                .arg(self.inner.min_replicas)
                .arg(self.inner.wait_timeout_ms)
                .query_async(&mut conn)
                .await
            {
                Ok(n) => n,
                Err(e) => return Err(self.classify(&mut conn, e)),
            };
            if acked < i64::from(self.inner.min_replicas) {
                self.inner
                    .metrics
                    .redis_errors
                    .with_label_values(&["replication"])
                    .inc();
                return Err(StoreError::ReplicasLagging {
                    acked: acked.max(0) as u32,
                    wanted: self.inner.min_replicas,
                });
            }
        }
        Ok(decoded)
    }

    async fn invoke(
        &self,
        conn: &mut Conn,
        script: &Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<Value, StoreError> {
        let started = Instant::now();
        let mut invocation = script.redis().prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        for arg in args {
            invocation.arg(*arg);
        }
        let result: Result<Value, _> = invocation.invoke_async(conn).await;
        self.inner
            .metrics
            .script_duration
            .with_label_values(&[script.name()])
            .observe(started.elapsed().as_secs_f64());
        result.map_err(|e| self.classify(conn, e))
    }

    /// Loads every script into Redis's script cache.
    pub async fn load_scripts(&self) -> Result<(), StoreError> {
        let mut conn = self.conn().await?;
        for script in scripts::ALL.iter() {
            let loaded: Result<String, _> = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(script.source())
                .query_async(&mut conn)
                .await;
            loaded.map_err(|e| self.classify(&mut conn, e))?;
        }
        Ok(())
    }

    /// Readiness: Redis answers and every script is in its cache (a Redis
    /// restart empties the cache; this reloads it).
    pub async fn check_ready(&self) -> Result<(), StoreError> {
        let mut conn = self.conn().await?;
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("EXISTS");
        for script in scripts::ALL.iter() {
            cmd.arg(script.redis().get_hash());
        }
        let present: Result<Vec<i64>, _> = cmd.query_async(&mut conn).await;
        let present = present.map_err(|e| self.classify(&mut conn, e))?;
        drop(conn);
        if present.contains(&0) {
            self.load_scripts().await?;
        }
        Ok(())
    }

    /// Sends one raw command (tests and the benchmark use this for
    /// inspection; primitives never do).
    pub async fn raw<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, StoreError> {
        let mut conn = self.conn().await?;
        let result: Result<T, _> = cmd.query_async(&mut conn).await;
        result.map_err(|e| self.classify(&mut conn, e))
    }
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
