//! JSON logs through `tracing`, filtered by `LATCHKEY_LOG`.
//!
//! Holder ids are capabilities: nothing at info level or above logs them,
//! and request spans carry the route template, not the raw path.

use tracing_subscriber::EnvFilter;

/// Installs the global JSON subscriber. Safe to call more than once (later
/// calls are ignored), which tests rely on.
pub fn init(filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(true)
        .with_target(true)
        .try_init();
}
