//! What every request handler shares: a bundle of handles, built once by
//! [`crate::app::Application::build`] and cloned into each request (and
//! into each extractor that reads it) as one reference count.
//!
//! This module is a leaf: it knows the primitives and the engines, but
//! nothing of the router, the HTTP layers or the server that runs them.

use std::ops::Deref;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::config::keys::Keys;
use crate::coord::latches::Latches;
use crate::coord::locks::Locks;
use crate::coord::multilocks::MultiLocks;
use crate::coord::ratelimiters::RateLimiters;
use crate::coord::redlock::RedLocks;
use crate::coord::rwlocks::RwLocks;
use crate::coord::semaphores::Semaphores;
use crate::coord::sessions::Sessions;
use crate::metrics::Metrics;
use crate::store::Store;
use crate::wait::WaitEngine;

/// The shared handles behind one `Arc`: axum clones the state for every
/// request and every extractor that reads it, and cloning the bundle field
/// by field cost dozens of atomic increments (and a lock in the shutdown
/// token's tree) per clone, about 5% of the service's CPU under load.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub fn new(shared: Shared) -> AppState {
        AppState(Arc::new(shared))
    }
}

impl Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What [`AppState`] shares.
pub struct Shared {
    /// The validated settings (lease and wait ranges, limits).
    pub config: Arc<Config>,
    /// Redis: scripts, connections, readiness.
    pub store: Store,
    /// The blocking-wait engine shared by every primitive.
    pub engine: WaitEngine,
    /// Reentrant locks (`/locks`).
    pub locks: Locks,
    /// Fair locks (`/fair-locks`).
    pub fair_locks: Locks,
    /// Multi-locks over the plain locks (`/multilocks`).
    pub multilocks: MultiLocks,
    /// Read-write locks (`/rwlocks`).
    pub rwlocks: RwLocks,
    /// Semaphores with leased permits (`/semaphores`).
    pub semaphores: Semaphores,
    /// RedLock over the independent `redlock_nodes` (`/redlocks`); `None`
    /// when none are configured.
    pub redlocks: Option<RedLocks>,
    /// Sessions that holds of every primitive attach to (`/sessions`).
    pub sessions: Sessions,
    /// Count-down latches (`/latches`).
    pub latches: Latches,
    /// GCRA rate limiters (`/rate-limiters`).
    pub rate_limiters: RateLimiters,
    /// The configured API keys (none: the service is open).
    pub keys: Keys,
    /// The service's Prometheus registry.
    pub metrics: Metrics,
    /// Cancelled once on SIGTERM/Ctrl-C: open waits end with 503 `shutting-down`.
    pub shutdown: CancellationToken,
}
