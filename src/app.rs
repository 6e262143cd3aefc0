//! Start-up, serving and graceful shutdown.
//!
//! [`Application::build`] binds the listener from the configuration (port 0
//! picks a free port, which is how tests start the real app) and connects
//! to Redis; [`Application::run`] serves until the shutdown token fires,
//! then drains for at most `shutdown_grace_ms`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::config::keys::Keys;
use crate::coord::latches::Latches;
use crate::coord::locks::{LockKind, Locks};
use crate::coord::multilocks::MultiLocks;
use crate::coord::ratelimiters::RateLimiters;
use crate::coord::redlock::RedLocks;
use crate::coord::rwlocks::RwLocks;
use crate::coord::semaphores::Semaphores;
use crate::coord::sessions::Sessions;
use crate::http;
use crate::metrics::Metrics;
use crate::state::{AppState, Shared};
use crate::store::pubsub::Hub;
use crate::store::{Store, StoreConfig};
use crate::wait::WaitEngine;

pub struct Application {
    listener: TcpListener,
    router: http::Service,
    state: AppState,
    addr: SocketAddr,
}

impl Application {
    /// Connects to Redis, starts the pub/sub hub and binds the listener.
    /// `config.redis_urls` must be set (dev mode is resolved by [`run`]).
    pub async fn build(config: Config) -> Result<Application, String> {
        if config.redis_urls.is_empty() {
            return Err("no Redis URL configured".into());
        }
        let metrics = Metrics::new();
        let shutdown = CancellationToken::new();
        let store_config = StoreConfig::from_config(&config).map_err(|e| e.to_string())?;
        let store = Store::open(&store_config, metrics.clone()).await?;
        store.check_eviction_policy().await;
        let hub = Hub::start(
            store.connector(),
            store.channel_pattern(),
            shutdown.clone(),
            metrics.clone(),
            config.redis_connect_timeout(),
        );
        let engine = WaitEngine::new(hub, config.max_waiters, shutdown.clone(), metrics.clone());
        let grace_ms = config.queue_grace_ms;
        // RedLock nodes that are down now are tried again on every call;
        // readiness is about the main Redis only.
        let redlocks = if config.redlock_nodes.is_empty() {
            None
        } else {
            let nodes = &config.redlock_nodes;
            Some(RedLocks::open(nodes, &store_config, store.clone(), metrics.clone()).await?)
        };
        let keys = Keys::from_config(&config)?;
        if keys.open() {
            tracing::warn!(
                "no API keys are configured: anyone who reaches this port can acquire, \
                 release, force-unlock and delete every object (set api_keys or api_keys_file)"
            );
        }
        let locks = Locks::new(store.clone(), LockKind::Plain);
        let fair_locks = Locks::new(store.clone(), LockKind::Fair { grace_ms });
        let rwlocks = RwLocks::new(store.clone(), grace_ms);
        let semaphores = Semaphores::new(store.clone(), grace_ms);
        let sessions = Sessions::new(
            store.clone(),
            (locks.clone(), fair_locks.clone()),
            rwlocks.clone(),
            semaphores.clone(),
            redlocks.clone(),
        );
        let state = AppState::new(Shared {
            keys,
            config: Arc::new(config),
            locks,
            fair_locks,
            multilocks: MultiLocks::new(store.clone()),
            rwlocks,
            semaphores,
            redlocks,
            sessions,
            latches: Latches::new(store.clone()),
            rate_limiters: RateLimiters::new(store.clone()),
            store,
            engine,
            metrics,
            shutdown,
        });
        let listener = TcpListener::bind(state.config.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", state.config.listen))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let router = http::router(state.clone());
        Ok(Application {
            listener,
            router,
            state,
            addr,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Whether the pub/sub subscriber is connected: until it is, a release
    /// on another instance may not wake this instance's waiters at once
    /// (they still re-check on their own timers). Tests wait for it.
    pub fn subscribed(&self) -> tokio::sync::watch::Receiver<bool> {
        self.state.engine.subscribed()
    }

    /// Cancel it to start a graceful shutdown (what SIGTERM does).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.state.shutdown.clone()
    }

    /// Serves until the shutdown token is cancelled, then stops accepting,
    /// lets open waits end with 503 `shutting-down`, and returns within
    /// `shutdown_grace_ms` even if some connection does not finish.
    pub async fn run(self) -> std::io::Result<()> {
        let token = self.state.shutdown.clone();
        let grace = Duration::from_millis(self.state.config.shutdown_grace_ms);
        let mut server = tokio::spawn(serve(self.listener, self.router, token.clone()));
        tokio::select! {
            result = &mut server => return result.map_err(std::io::Error::other),
            _ = token.cancelled() => {}
        }
        tracing::info!(grace_ms = grace.as_millis() as u64, "shutting down");
        match tokio::time::timeout(grace, &mut server).await {
            Ok(result) => result.map_err(std::io::Error::other),
            Err(_) => {
                tracing::warn!("shutdown grace period ended with connections still open");
                server.abort();
                Ok(())
            }
        }
    }
}

/// Serves HTTP/1.1 connections until `token` is cancelled, then asks every
/// connection to finish the request it is answering and close, and returns
/// once all of them have.
///
/// This drives hyper's HTTP/1 connections itself rather than through
/// `axum::serve`, which first reads a few bytes of each connection to tell
/// HTTP/1 from HTTP/2 (this build serves HTTP/1 only) and hands them back:
/// hyper's read buffer, then 24 bytes short of its 8 KiB, doubled to 16 KiB
/// on its next read, for every open connection, parked long-polls included.
/// Connections also get TCP_NODELAY, so that Nagle's algorithm cannot hold
/// back a small write (an SSE event) while an earlier one is unacknowledged.
///
/// Each connection serves a clone of the router (an `Arc`): serving a
/// `Router` through `axum::serve` rebuilt its whole route table for every
/// connection (axum's per-connection `with_state(())`), about 1.6 KiB per
/// route.
async fn serve(listener: TcpListener, router: http::Service, token: CancellationToken) {
    // Every connection task holds a sender; the receiver sees the channel
    // close once the last of them has finished.
    let (open, mut all_closed) = tokio::sync::mpsc::channel::<()>(1);
    let http = hyper::server::conn::http1::Builder::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = token.cancelled() => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // E.g. out of file descriptors: the listener itself is
                // fine, so wait a little (while connections close) and go on.
                tracing::warn!(error = %e, "cannot accept a connection");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(50)) => continue,
                    () = token.cancelled() => break,
                }
            }
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let connection = http.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
        let (token, open) = (token.clone(), open.clone());
        tokio::spawn(async move {
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                () = token.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
            drop(open);
        });
    }
    drop(open);
    let _ = all_closed.recv().await;
}

/// Process entry: starts dev-mode Redis servers when no Redis URL is
/// configured, runs the service until SIGTERM/Ctrl-C, and stops the
/// children on the way out.
pub fn run(mut config: Config) -> Result<(), String> {
    // Declared before the runtime so it is dropped after it: the Redis
    // children outlive every task that might still talk to them.
    let _dev = if config.dev_mode() {
        let dev = crate::devredis::DevRedis::start()?;
        config.redis_urls = vec![dev.main_url()];
        if config.redlock_nodes.is_empty() {
            config.redlock_nodes = dev.redlock_urls();
        }
        tracing::info!(
            main = %dev.main_url(),
            redlock = ?dev.redlock_urls(),
            "dev mode: no LATCHKEY_REDIS_URL, started private redis-server processes \
             (no persistence; they stop when latchkey exits)"
        );
        Some(dev)
    } else {
        None
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    // Woken tasks queue in order instead of the last one jumping the queue
    // (tokio's "LIFO slot"). With the slot, each request's Redis call woke
    // the connection's writer task at once, so it wrote one command per
    // syscall; without it the writer runs after the other ready requests
    // and sends their commands together: 1.1-1.3x the acquire+release pairs
    // per second at 16 and 64 connections on one core (the book's
    // "Ablations (what paid, what did not)" (docs/src/benchmark.md)). The
    // setting is in tokio's unstable API, enabled by `.cargo/config.toml`.
    #[cfg(tokio_unstable)]
    builder.disable_lifo_slot();
    let runtime = builder
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async move {
        let signals = ShutdownSignals::install()?;
        let app = Application::build(config).await?;
        tokio::spawn(signals.cancel_on_signal(app.shutdown_token()));
        tracing::info!(addr = %app.local_addr(), "latchkey listening");
        app.run().await.map_err(|e| format!("server error: {e}"))
    })?;
    runtime.shutdown_timeout(Duration::from_secs(1));
    tracing::info!("stopped");
    Ok(())
}

/// SIGTERM and SIGINT (Ctrl-C) listeners. They are registered when
/// created, so a signal that arrives before the first poll is not lost (and
/// does not fall through to the default action, which would kill the
/// process without a graceful shutdown).
struct ShutdownSignals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    fn install() -> Result<Self, String> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let term = signal(SignalKind::terminate())
                .map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
            let int = signal(SignalKind::interrupt())
                .map_err(|e| format!("cannot handle SIGINT: {e}"))?;
            Ok(ShutdownSignals { term, int })
        }
        #[cfg(not(unix))]
        Ok(ShutdownSignals {})
    }

    /// Cancels `token` on the first signal.
    async fn cancel_on_signal(mut self, token: CancellationToken) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => tracing::info!("SIGTERM received"),
            _ = self.int.recv() => tracing::info!("SIGINT received"),
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        token.cancel();
    }
}

#[cfg(test)]
mod tests {
    /// `.cargo/config.toml` turns on tokio's unstable API for the runtime
    /// setting in [`super::run`]; without it the build still works but
    /// serves fewer requests per core, so losing it must not go unnoticed.
    #[test]
    fn the_build_enables_the_runtime_setting() {
        let enabled: bool = cfg!(tokio_unstable);
        assert!(
            enabled,
            "built without --cfg tokio_unstable: see .cargo/config.toml"
        );
    }
}
