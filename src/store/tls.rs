//! TLS for every Redis connection latchkey makes: the main deployment
//! (the shared connections, the dedicated pool, the pub/sub hub, Sentinel
//! lookups and the masters they name, Cluster nodes) and the RedLock nodes.
//!
//! A `rediss://` URL connects with TLS; `redis://` URLs are untouched. What
//! such connections trust and show is read from the settings' files at start
//! ([`RedisTls`], in the configuration); this module makes clients with it.
//! [`RedisTls::client`] is the one place that makes a client for a single
//! server; the Sentinel and Cluster clients take [`RedisTls::certificates`].

use redis::{ConnectionAddr, IntoConnectionInfo, RedisResult, TlsMode};

pub use crate::config::tls::RedisTls;

impl RedisTls {
    /// A client for one server (a URL or connection info): with the CA and
    /// the client certificate when it is a TLS address.
    pub fn client(&self, info: impl IntoConnectionInfo) -> RedisResult<redis::Client> {
        let info = info.into_connection_info()?;
        match self.certificates() {
            Some(certs) if tls_mode(info.addr()).is_some() => {
                redis::Client::build_with_tls(info, certs.clone())
            }
            _ => redis::Client::open(info),
        }
    }
}

/// How an address uses TLS: not at all (`redis://`), checking the server's
/// certificate (`rediss://`), or not checking it (`rediss://…#insecure`).
pub fn tls_mode(addr: &ConnectionAddr) -> Option<TlsMode> {
    match addr {
        ConnectionAddr::TcpTls { insecure: true, .. } => Some(TlsMode::Insecure),
        ConnectionAddr::TcpTls { .. } => Some(TlsMode::Secure),
        _ => None,
    }
}
