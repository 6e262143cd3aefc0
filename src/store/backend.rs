//! Standalone, Sentinel and Cluster deployments behind one type, so the
//! rest of the store does not care which one it talks to.
//!
//! - **Standalone**: a pool of multiplexed connections to one server.
//! - **Sentinel**: the same pool, but every new connection first asks the
//!   Sentinels for the current master. A connection that sees an I/O error,
//!   a timeout or a `READONLY` reply (its server was demoted in a failover)
//!   is discarded, so the next request connects to the new master.
//! - **Cluster**: the redis crate's cluster connection, which is multiplexed,
//!   routes each script by its keys' slot (all keys of one object share a
//!   hash tag) and follows topology changes by itself; it is shared by all
//!   requests rather than pooled.
//!
//! [`Connector`] answers "a client for the server to use now", for the pool
//! and for the pub/sub hub's dedicated connection.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{IntoConnectionInfo, RedisError, RedisResult};

use super::pool::{self, ConnPool, RedisManager};
use crate::config::{RedisMode, redact};

/// Where new connections go.
#[derive(Clone)]
pub enum Connector {
    /// One fixed server.
    Direct(Box<redis::Client>),
    /// The master the Sentinels name at the time of connecting.
    Sentinel(Arc<tokio::sync::Mutex<SentinelClient>>),
    /// Any node of a cluster (classic pub/sub messages reach every node);
    /// rotates through the seeds so a dead node is skipped on reconnect.
    AnyNode {
        clients: Arc<Vec<redis::Client>>,
        next: Arc<AtomicUsize>,
    },
}

impl Connector {
    pub async fn client(&self) -> RedisResult<redis::Client> {
        match self {
            Connector::Direct(client) => Ok((**client).clone()),
            Connector::Sentinel(sentinel) => sentinel.lock().await.async_get_client().await,
            Connector::AnyNode { clients, next } => {
                let i = next.fetch_add(1, Ordering::Relaxed) % clients.len();
                Ok(clients[i].clone())
            }
        }
    }
}

/// The request-serving side of a deployment.
pub enum Backend {
    Pooled(ConnPool),
    Cluster(Box<ClusterBackend>),
}

pub struct ClusterBackend {
    client: ClusterClient,
    /// Created on first use (Redis may be down at start) and shared.
    conn: tokio::sync::Mutex<Option<ClusterConnection>>,
    connect_timeout: Duration,
}

/// Settings needed to reach a deployment.
pub struct Target<'a> {
    pub mode: RedisMode,
    pub urls: &'a [String],
    pub sentinel_master: &'a str,
    pub pool_size: usize,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
}

/// Builds the request backend and the connector for pub/sub.
pub fn open(target: &Target<'_>) -> Result<(Backend, Connector), String> {
    let invalid = |url: &str, e: RedisError| format!("invalid Redis URL {}: {e}", redact(url));
    match target.mode {
        RedisMode::Standalone => {
            let url = target.urls.first().ok_or("no Redis URL")?;
            let client = redis::Client::open(url.as_str()).map_err(|e| invalid(url, e))?;
            let connector = Connector::Direct(Box::new(client));
            let pool = pooled(connector.clone(), target)?;
            Ok((Backend::Pooled(pool), connector))
        }
        RedisMode::Sentinel => {
            let first = target.urls.first().ok_or("no Sentinel URL")?;
            let info = first
                .as_str()
                .into_connection_info()
                .map_err(|e| invalid(first, e))?;
            // Credentials and database in the URLs apply to the master too.
            let node = SentinelNodeConnectionInfo::default()
                .set_redis_connection_info(info.redis_settings().clone());
            let node = if first.starts_with("rediss://") {
                node.set_tls_mode(redis::TlsMode::Secure)
            } else {
                node
            };
            let sentinel = SentinelClient::build(
                target.urls.iter().map(String::as_str).collect(),
                target.sentinel_master,
                Some(node),
                SentinelServerType::Master,
            )
            .map_err(|e| format!("invalid Sentinel configuration: {e}"))?;
            let connector = Connector::Sentinel(Arc::new(tokio::sync::Mutex::new(sentinel)));
            let pool = pooled(connector.clone(), target)?;
            Ok((Backend::Pooled(pool), connector))
        }
        RedisMode::Cluster => {
            let client = ClusterClient::builder(target.urls.iter().map(String::as_str))
                .connection_timeout(target.connect_timeout)
                .response_timeout(target.response_timeout)
                .build()
                .map_err(|e| format!("invalid Redis Cluster configuration: {e}"))?;
            let clients = target
                .urls
                .iter()
                .map(|u| redis::Client::open(u.as_str()).map_err(|e| invalid(u, e)))
                .collect::<Result<Vec<_>, _>>()?;
            let connector = Connector::AnyNode {
                clients: Arc::new(clients),
                next: Arc::new(AtomicUsize::new(0)),
            };
            let backend = Backend::Cluster(Box::new(ClusterBackend {
                client,
                conn: tokio::sync::Mutex::new(None),
                connect_timeout: target.connect_timeout,
            }));
            Ok((backend, connector))
        }
    }
}

fn pooled(connector: Connector, target: &Target<'_>) -> Result<ConnPool, String> {
    let manager = RedisManager::new(connector, target.connect_timeout, target.response_timeout);
    pool::build(manager, target.pool_size, target.connect_timeout)
}

/// A connection checked out for one call.
pub enum Conn {
    Pooled(pool::Conn),
    Cluster(ClusterConnection),
}

impl Conn {
    /// Never hand this connection out again (pooled only; the cluster
    /// connection repairs itself).
    pub fn mark_broken(&mut self) {
        if let Conn::Pooled(conn) = self {
            conn.mark_broken();
        }
    }
}

impl Backend {
    pub async fn get(&self) -> Result<Conn, String> {
        match self {
            Backend::Pooled(pool) => pool
                .get()
                .await
                .map(Conn::Pooled)
                .map_err(|e| e.to_string()),
            Backend::Cluster(cluster) => {
                let ClusterBackend {
                    client,
                    conn,
                    connect_timeout,
                } = &**cluster;
                let mut cached = conn.lock().await;
                if let Some(conn) = cached.as_ref() {
                    return Ok(Conn::Cluster(conn.clone()));
                }
                // Topology discovery talks to several nodes: allow a few
                // connect timeouts' worth.
                let created = tokio::time::timeout(
                    *connect_timeout * 3,
                    Box::pin(client.get_async_connection()),
                )
                .await
                .map_err(|_| "timed out connecting to the cluster".to_string())?
                .map_err(|e| e.to_string())?;
                *cached = Some(created.clone());
                Ok(Conn::Cluster(created))
            }
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::Pooled(conn) => (***conn).req_packed_command(cmd),
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
            Conn::Pooled(conn) => (***conn).req_packed_commands(cmd, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Pooled(conn) => (***conn).get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}
