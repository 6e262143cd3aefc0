//! What every request handler shares: a bundle of cheap handles, built once
//! by [`crate::app::Application::build`] and cloned into each request.
//!
//! This module is a leaf: it knows the primitives and the engines, but
//! nothing of the router, the HTTP layers or the server that runs them.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::coord::latches::Latches;
use crate::coord::locks::Locks;
use crate::coord::multilocks::MultiLocks;
use crate::coord::ratelimiters::RateLimiters;
use crate::coord::redlock::RedLocks;
use crate::coord::rwlocks::RwLocks;
use crate::coord::semaphores::Semaphores;
use crate::http::access::Keys;
use crate::metrics::Metrics;
use crate::store::Store;
use crate::wait::WaitEngine;

/// Every field is a cheap handle (an `Arc` inside), so a clone per request
/// is a handful of reference-count increments.
#[derive(Clone)]
pub struct AppState {
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
