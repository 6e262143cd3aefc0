//! Where new connections go: [`Connector`] answers "a client for the
//! server to use now", for the backend's connections, the dedicated pool's
//! and the pub/sub hub's; on a cluster it hands the hub the
//! [`ClusterTarget`] to build its own cluster connection from. A Sentinel
//! deployment's [`SentinelTarget`] asks the Sentinels for the master at
//! each connect.

use std::sync::Arc;
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo, RedisResult,
    TlsCertificates, TlsMode,
};

use super::tls::{RedisTls, tls_mode};
use crate::config::redact;

/// Where new connections go.
#[derive(Clone)]
pub enum Connector {
    /// One fixed server.
    Direct(Box<redis::Client>),
    /// The master the Sentinels name at the time of connecting.
    Sentinel(Arc<SentinelTarget>),
    /// A Redis Cluster: the pub/sub hub makes its own cluster connection
    /// (sharded pub/sub, one subscription per channel on the shard that
    /// owns it), with the same seeds and settings as the backend's.
    Cluster(Arc<ClusterTarget>),
}

/// What it takes to build a cluster client: the request backend and the
/// pub/sub hub each build theirs from it.
pub struct ClusterTarget {
    urls: Vec<String>,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// The seeds' scheme decides TLS; certificates only go with it.
    tls: Option<(TlsMode, TlsCertificates)>,
}

impl ClusterTarget {
    pub(super) fn new(
        urls: &[String],
        tls: &RedisTls,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Self, String> {
        let seed = urls.first().ok_or("no Redis Cluster URL")?;
        for url in urls {
            tls.client(url.as_str())
                .map_err(|e| format!("invalid Redis URL {}: {e}", redact(url)))?;
        }
        let seed = tls
            .client(seed.as_str())
            .map_err(|e| format!("invalid Redis URL {}: {e}", redact(seed)))?;
        let tls = tls_mode(seed.get_connection_info().addr()).zip(tls.certificates().cloned());
        let cluster = ClusterTarget {
            urls: urls.to_vec(),
            connect_timeout,
            response_timeout,
            tls,
        };
        // Validate the settings once, at start.
        cluster
            .builder()
            .build()
            .map_err(|e| format!("invalid Redis Cluster configuration: {e}"))?;
        Ok(cluster)
    }

    /// A builder with the seeds, timeouts and TLS settings; callers add
    /// their own (the hub: RESP3 and a push sender).
    pub fn builder(&self) -> ClusterClientBuilder {
        let mut builder = ClusterClient::builder(self.urls.iter().map(String::as_str))
            .connection_timeout(self.connect_timeout)
            .response_timeout(self.response_timeout);
        if let Some((mode, certs)) = &self.tls {
            builder = builder.tls(*mode).certs(certs.clone());
        }
        builder
    }

    /// How long making a cluster connection may take: topology discovery
    /// talks to several nodes, so a few connect timeouts' worth.
    pub fn discovery_timeout(&self) -> Duration {
        self.connect_timeout * 3
    }
}

/// What it takes to ask the Sentinels for the master. A fresh
/// `SentinelClient` is built per lookup (that is cheap and needs no I/O),
/// so concurrent lookups never queue behind one another or a dead Sentinel.
pub struct SentinelTarget {
    sentinels: Vec<ConnectionAddr>,
    master: String,
    /// Credentials, database and protocol from the URLs: for the Sentinels
    /// and the master alike (the database for the master only).
    settings: RedisConnectionInfo,
    /// With `rediss://` Sentinel URLs the master is reached over TLS too.
    tls_mode: Option<TlsMode>,
    /// The CA and client certificate, for both (TLS only).
    certs: Option<TlsCertificates>,
}

impl SentinelTarget {
    pub(super) fn new(urls: &[String], master: &str, tls: &RedisTls) -> Result<Self, String> {
        let infos = urls
            .iter()
            .map(|url| {
                url.as_str()
                    .into_connection_info()
                    .map_err(|e| format!("invalid Sentinel URL {}: {e}", redact(url)))
            })
            .collect::<Result<Vec<ConnectionInfo>, _>>()?;
        let first = infos.first().ok_or("no Sentinel URL")?;
        let mode = tls_mode(first.addr());
        let settings = first.redis_settings();
        let alike = |info: &ConnectionInfo| {
            let other = info.redis_settings();
            tls_mode(info.addr()) == mode
                && (other.username(), other.password(), other.db())
                    == (settings.username(), settings.password(), settings.db())
        };
        if !infos.iter().all(alike) {
            return Err(
                "the Sentinel URLs must share one scheme (redis:// or rediss://), \
                 one user, one password and one database"
                    .into(),
            );
        }
        let target = SentinelTarget {
            sentinels: infos.iter().map(|info| info.addr().clone()).collect(),
            master: master.to_string(),
            settings: settings.clone(),
            tls_mode: mode,
            certs: mode.and(tls.certificates().cloned()),
        };
        // Validate the URLs, the master name and the certificates once, at
        // start.
        target
            .lookup()
            .map_err(|e| format!("invalid Sentinel configuration: {e}"))?;
        Ok(target)
    }

    /// A client that asks the Sentinels for the master, then connects to it.
    fn lookup(&self) -> RedisResult<SentinelClient> {
        let s = &self.settings;
        let mut builder = SentinelClientBuilder::new(
            self.sentinels.iter().cloned(),
            &self.master,
            SentinelServerType::Master,
        )?
        .set_client_to_sentinel_protocol(s.protocol())
        .set_client_to_redis_protocol(s.protocol())
        .set_client_to_redis_db(s.db());
        if let Some(user) = s.username() {
            builder = builder
                .set_client_to_sentinel_username(user)
                .set_client_to_redis_username(user);
        }
        if let Some(password) = s.password() {
            builder = builder
                .set_client_to_sentinel_password(password)
                .set_client_to_redis_password(password);
        }
        if let Some(mode) = self.tls_mode {
            builder = builder.set_client_to_redis_tls_mode(mode);
        }
        if let Some(certs) = &self.certs {
            builder = builder
                .set_client_to_sentinel_certificates(certs.clone())
                .set_client_to_redis_certificates(certs.clone());
        }
        builder.build()
    }
}

impl Connector {
    pub async fn client(&self) -> RedisResult<redis::Client> {
        match self {
            Connector::Direct(client) => Ok((**client).clone()),
            Connector::Sentinel(target) => target.lookup()?.async_get_client().await,
            // Never asked: nothing in cluster mode connects to one node.
            Connector::Cluster(_) => Err(std::io::Error::other(
                "a Redis Cluster has no single server to connect to",
            )
            .into()),
        }
    }
}
