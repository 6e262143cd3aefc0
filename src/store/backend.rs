//! Standalone, Sentinel and Cluster deployments behind one type, so the
//! rest of the store does not care which one it talks to.
//!
//! - **Standalone / Sentinel**: a few long-lived multiplexed connections
//!   ([`Shared`]) that every request uses; concurrent commands are
//!   pipelined on them. A connection that sees an I/O error, a timeout or a
//!   `READONLY` reply (its server was demoted in a failover) is discarded,
//!   and the next call on its slot connects again — in Sentinel mode to
//!   the master the Sentinels name at that moment. Writes that must wait
//!   for replicas (`WAIT` blocks the connection it runs on) use a pool of
//!   dedicated connections instead ([`super::pool`]).
//! - **Cluster**: the redis crate's cluster connection, which is
//!   multiplexed, routes each script by its keys' slot (all keys of one
//!   object share a hash tag) and follows topology changes by itself.
//!
//! No lock is ever held across network I/O: a connection is made outside
//! any lock and then stored (if two calls race to connect, one connection
//! is kept and the other dropped).
//!
//! [`open`] also hands back the [`Connector`] new connections go to
//! ([`super::connector`]), for the pub/sub hub.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, RedisError, RedisResult};

use deadpool::managed::PoolError;

use super::connector::{ClusterTarget, Connector, SentinelTarget};
use super::pool::{self, ConnPool, RedisManager};
use super::tls::RedisTls;
use crate::config::{RedisMode, redact};

/// A fixed number of shared multiplexed connections, made on first use
/// and replaced after a failure. A call takes the next connected slot in
/// round-robin order; an empty slot is filled in the background while its
/// neighbours serve, so only the very first call (or a call after every
/// connection died) waits for a connect.
pub struct Shared {
    inner: Arc<SharedInner>,
}

struct SharedInner {
    slots: Vec<SlotState>,
    /// Round-robin cursor over `slots`.
    next: AtomicUsize,
    /// Numbers connections, so a stale failure never discards a newer one.
    generation: AtomicU64,
    connector: Connector,
    config: AsyncConnectionConfig,
    connect_timeout: Duration,
}

#[derive(Default)]
struct SlotState {
    conn: Mutex<Option<(u64, MultiplexedConnection)>>,
    /// A background connect for this slot is under way.
    filling: AtomicBool,
}

/// Which shared connection a call used (to discard it after a failure).
#[derive(Debug, Clone, Copy)]
pub struct SlotRef {
    slot: usize,
    generation: u64,
}

impl Shared {
    fn new(connector: Connector, size: usize, connect: Duration, response: Duration) -> Self {
        Shared {
            inner: Arc::new(SharedInner {
                slots: (0..size.max(1)).map(|_| SlotState::default()).collect(),
                next: AtomicUsize::new(0),
                generation: AtomicU64::new(0),
                connector,
                config: AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(connect))
                    .set_response_timeout(Some(response)),
                connect_timeout: connect,
            }),
        }
    }

    /// A connection to use. With `replacing`, the connection a failed call
    /// used is dropped and its slot connected again (a retry after a
    /// failure that may have come from a dead connection).
    async fn get(
        &self,
        replacing: Option<SlotRef>,
    ) -> RedisResult<(SlotRef, MultiplexedConnection)> {
        let inner = &self.inner;
        if let Some(used) = replacing {
            inner.discard(used);
            return inner.connect(used.slot).await;
        }
        match self.ready() {
            Ok(found) => Ok(found),
            Err(empty) => inner.connect(empty).await,
        }
    }

    /// The next connected slot's connection, round robin (an empty slot on
    /// the way is filled in the background); `Err` with the slot to
    /// connect when none is connected.
    fn ready(&self) -> Result<(SlotRef, MultiplexedConnection), usize> {
        let inner = &self.inner;
        let n = inner.slots.len();
        let first = inner.next.fetch_add(1, Ordering::Relaxed) % n;
        for i in (0..n).map(|k| (first + k) % n) {
            if let Some(found) = inner.current(i) {
                if i != first {
                    self.fill_in_background(first);
                }
                return Ok(found);
            }
        }
        Err(first)
    }

    fn fill_in_background(&self, slot: usize) {
        if self.inner.slots[slot].filling.swap(true, Ordering::AcqRel) {
            return;
        }
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let _ = inner.connect(slot).await;
            inner.slots[slot].filling.store(false, Ordering::Release);
        });
    }

    /// Forgets the connection `used` refers to, unless it was replaced.
    fn discard(&self, used: SlotRef) {
        self.inner.discard(used);
    }
}

impl SharedInner {
    fn current(&self, slot: usize) -> Option<(SlotRef, MultiplexedConnection)> {
        let stored = self.slots[slot].conn.lock();
        let (generation, conn) = stored.as_ref()?;
        Some((
            SlotRef {
                slot,
                generation: *generation,
            },
            conn.clone(),
        ))
    }

    /// Connects (no lock held meanwhile) and stores the connection in
    /// `slot`, unless another call filled it first; returns what the slot
    /// holds then.
    async fn connect(&self, slot: usize) -> RedisResult<(SlotRef, MultiplexedConnection)> {
        let connect = async {
            self.connector
                .client()
                .await?
                .get_multiplexed_async_connection_with_config(&self.config)
                .await
        };
        let conn = tokio::time::timeout(self.connect_timeout * 2, connect)
            .await
            .map_err(|_| timed_out("timed out connecting to Redis"))??;
        let mut stored = self.slots[slot].conn.lock();
        let (generation, conn) = stored
            .get_or_insert_with(|| (self.generation.fetch_add(1, Ordering::Relaxed), conn))
            .clone();
        Ok((SlotRef { slot, generation }, conn))
    }

    fn discard(&self, used: SlotRef) {
        let mut stored = self.slots[used.slot].conn.lock();
        if stored.as_ref().is_some_and(|(g, _)| *g == used.generation) {
            *stored = None;
        }
    }
}

/// The request-serving side of a deployment.
pub enum Backend {
    Single {
        shared: Shared,
        /// Dedicated connections for writes followed by `WAIT`
        /// (only built when `min_replicas > 0`).
        dedicated: Option<ConnPool>,
    },
    Cluster(Box<ClusterBackend>),
}

pub struct ClusterBackend {
    client: ClusterClient,
    /// Made on first use (Redis may be down at start) and shared.
    conn: Mutex<Option<ClusterConnection>>,
    connect_timeout: Duration,
}

/// Settings needed to reach a deployment.
pub struct Target<'a> {
    pub mode: RedisMode,
    pub urls: &'a [String],
    /// For `rediss://` URLs.
    pub tls: &'a RedisTls,
    pub sentinel_master: &'a str,
    pub connections: usize,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    /// Build the dedicated pool for `WAIT` writes.
    pub dedicated_writes: bool,
}

/// Builds the request backend and the connector for pub/sub.
pub fn open(target: &Target<'_>) -> Result<(Backend, Connector), String> {
    let invalid = |url: &str, e: RedisError| format!("invalid Redis URL {}: {e}", redact(url));
    let connector = match target.mode {
        RedisMode::Standalone => {
            let url = target.urls.first().ok_or("no Redis URL")?;
            let client = target
                .tls
                .client(url.as_str())
                .map_err(|e| invalid(url, e))?;
            Connector::Direct(Box::new(client))
        }
        RedisMode::Sentinel => Connector::Sentinel(Arc::new(SentinelTarget::new(
            target.urls,
            target.sentinel_master,
            target.tls,
        )?)),
        RedisMode::Cluster => {
            let cluster = Arc::new(ClusterTarget::new(
                target.urls,
                target.tls,
                target.connect_timeout,
                target.response_timeout,
            )?);
            let client = cluster
                .builder()
                .build()
                .map_err(|e| format!("invalid Redis Cluster configuration: {e}"))?;
            let backend = Backend::Cluster(Box::new(ClusterBackend {
                client,
                conn: Mutex::new(None),
                connect_timeout: target.connect_timeout,
            }));
            return Ok((backend, Connector::Cluster(cluster)));
        }
    };
    let dedicated = if target.dedicated_writes {
        let manager = RedisManager::new(
            connector.clone(),
            target.connect_timeout,
            target.response_timeout,
        );
        Some(pool::build(
            manager,
            target.connections,
            target.connect_timeout,
        )?)
    } else {
        None
    };
    let shared = Shared::new(
        connector.clone(),
        target.connections,
        target.connect_timeout,
        target.response_timeout,
    );
    Ok((Backend::Single { shared, dedicated }, connector))
}

/// A timeout, as the redis crate reports one (`is_timeout`).
fn timed_out(what: &str) -> RedisError {
    std::io::Error::new(std::io::ErrorKind::TimedOut, what.to_string()).into()
}

/// A connection checked out for one call.
pub enum Conn {
    Shared(SlotRef, MultiplexedConnection),
    Dedicated(pool::Conn),
    Cluster(ClusterConnection),
}

impl Backend {
    /// A connection for one call that is at hand without waiting (the
    /// common case: a connected shared slot, or the cluster connection);
    /// `None` when [`Backend::get`] must connect, replace or wait for one.
    /// It lets callers skip the (large) future of `get` when it would
    /// complete at once.
    pub fn ready(&self, dedicated: bool, fresh: Option<&Conn>) -> Option<Conn> {
        match self {
            Backend::Single {
                shared,
                dedicated: pool,
            } if fresh.is_none() && !(dedicated && pool.is_some()) => {
                let (slot, conn) = shared.ready().ok()?;
                Some(Conn::Shared(slot, conn))
            }
            Backend::Cluster(cluster) if fresh.is_none() => {
                cluster.conn.lock().as_ref().cloned().map(Conn::Cluster)
            }
            _ => None,
        }
    }

    /// A connection for one call. `dedicated` asks for one that no other
    /// call uses meanwhile (for `WAIT`); `fresh` replaces the connection a
    /// failed call used before handing it out again.
    /// Failures are the redis crate's: the store tells a refused login
    /// from an unreachable server by them.
    pub async fn get(&self, dedicated: bool, fresh: Option<&Conn>) -> RedisResult<Conn> {
        match self {
            Backend::Single {
                dedicated: Some(pool),
                ..
            } if dedicated => pool.get().await.map(Conn::Dedicated).map_err(|e| match e {
                PoolError::Backend(e) => e,
                PoolError::Timeout(_) => timed_out("no pooled Redis connection in time"),
                other => std::io::Error::other(other.to_string()).into(),
            }),
            Backend::Single { shared, .. } => {
                let used = match fresh {
                    Some(Conn::Shared(used, _)) => Some(*used),
                    _ => None,
                };
                let (slot, conn) = shared.get(used).await?;
                Ok(Conn::Shared(slot, conn))
            }
            Backend::Cluster(cluster) => cluster.get().await.map(Conn::Cluster),
        }
    }

    /// Never hand this connection out again (the cluster connection
    /// repairs itself).
    pub fn discard(&self, conn: &mut Conn) {
        match (self, conn) {
            (Backend::Single { shared, .. }, Conn::Shared(used, _)) => shared.discard(*used),
            (_, Conn::Dedicated(conn)) => conn.mark_broken(),
            _ => {}
        }
    }
}

impl ClusterBackend {
    async fn get(&self) -> RedisResult<ClusterConnection> {
        if let Some(conn) = self.conn.lock().as_ref() {
            return Ok(conn.clone());
        }
        // Topology discovery talks to several nodes: allow a few connect
        // timeouts' worth. Boxed: the creation future is deep enough to
        // overflow rustc's layout query limit in release builds when nested
        // in our async fns.
        let created = tokio::time::timeout(
            self.connect_timeout * 3,
            Box::pin(self.client.get_async_connection()),
        )
        .await
        .map_err(|_| timed_out("timed out connecting to the cluster"))??;
        Ok(self.conn.lock().get_or_insert(created).clone())
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::Shared(_, conn) => conn.req_packed_command(cmd),
            Conn::Dedicated(conn) => (***conn).req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::Shared(_, conn) => conn.req_packed_commands(cmd, offset, count),
            Conn::Dedicated(conn) => (***conn).req_packed_commands(cmd, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Shared(_, conn) => conn.get_db(),
            Conn::Dedicated(conn) => (***conn).get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}
