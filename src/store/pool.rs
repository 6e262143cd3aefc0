//! Dedicated Redis connections, for writes that must wait for replicas.
//!
//! `WAIT` blocks the connection it runs on until replicas acknowledge, so
//! it cannot share the multiplexed connections other requests use. When
//! `min_replicas > 0`, writes check a connection out of this pool, run the
//! script and `WAIT` on it, and return it.
//!
//! Built on deadpool with our own manager: it recycles without I/O (no
//! `PING` per checkout) and discards a connection that saw an I/O error or
//! timeout. Every connection has explicit connect and response timeouts;
//! the pool's wait timeout is the connect timeout, so a starved pool
//! answers 503 instead of queueing forever.

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use deadpool::managed::{self, Metrics as PoolMetrics, RecycleError, RecycleResult};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError};

use super::connector::Connector;

pub type ConnPool = managed::Pool<RedisManager>;
pub type Conn = managed::Object<RedisManager>;

/// A pooled connection plus whether it must be thrown away.
pub struct PooledConnection {
    conn: MultiplexedConnection,
    broken: bool,
}

impl PooledConnection {
    /// Marks the connection unusable: the pool drops it instead of reusing it.
    pub fn mark_broken(&mut self) {
        self.broken = true;
    }
}

impl Deref for PooledConnection {
    type Target = MultiplexedConnection;
    fn deref(&self) -> &MultiplexedConnection {
        &self.conn
    }
}

impl DerefMut for PooledConnection {
    fn deref_mut(&mut self) -> &mut MultiplexedConnection {
        &mut self.conn
    }
}

pub struct RedisManager {
    /// Which server a new connection goes to (fixed, or the current
    /// Sentinel master).
    connector: Connector,
    config: AsyncConnectionConfig,
}

impl RedisManager {
    pub fn new(connector: Connector, connect: Duration, response: Duration) -> Self {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect))
            .set_response_timeout(Some(response));
        RedisManager { connector, config }
    }
}

impl managed::Manager for RedisManager {
    type Type = PooledConnection;
    type Error = RedisError;

    async fn create(&self) -> Result<PooledConnection, RedisError> {
        let conn = self
            .connector
            .client()
            .await?
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        Ok(PooledConnection {
            conn,
            broken: false,
        })
    }

    async fn recycle(
        &self,
        conn: &mut PooledConnection,
        _: &PoolMetrics,
    ) -> RecycleResult<RedisError> {
        if conn.broken {
            Err(RecycleError::message(
                "connection saw an I/O error or timeout",
            ))
        } else {
            Ok(())
        }
    }
}

pub fn build(manager: RedisManager, size: usize, wait: Duration) -> Result<ConnPool, String> {
    managed::Pool::builder(manager)
        .max_size(size)
        .wait_timeout(Some(wait))
        .create_timeout(Some(wait))
        .recycle_timeout(Some(wait))
        .runtime(deadpool::Runtime::Tokio1)
        .build()
        .map_err(|e| format!("cannot build the Redis pool: {e}"))
}
