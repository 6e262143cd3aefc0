//! # latchkey
//!
//! Redisson's distributed locks and synchronizers served over plain HTTP.
//! A stateless axum service: all state lives in Redis and every state
//! change is one atomic Lua script. Blocking waits are long-polls or
//! Server-Sent Events woken by Redis pub/sub; clients renew their leases
//! with heartbeats.
//!
//! ## Module map
//!
//! - [`config`]: typed settings (defaults → TOML file → env → flags), validated at start;
//!   the API keys and Redis TLS files they name, read and checked.
//! - [`app`]: start-up, serving, graceful shutdown.
//! - [`state`]: [`state::AppState`], the handles every request handler shares.
//! - [`error`]: the one error type, rendered as `application/problem+json`.
//! - [`http`]: one module per resource (`locks`, `fair_locks`, `rwlocks`,
//!   `semaphores`, `latches`, `ratelimiters`, `multilocks`, `redlocks`,
//!   `sessions`, `health`), what the lock-like resources share
//!   (`lock_family`), the listings of every kind (`listings`) and
//!   `whoami`, the route list and its layers, the OpenAPI document,
//!   extractors, and the long-poll/SSE adapter.
//! - [`coord`]: the primitives as plain Rust APIs over the store (locks of
//!   both kinds, read-write locks, semaphores, count-down latches, GCRA
//!   rate limiters, multi-locks, RedLock over independent nodes, sessions
//!   that holds of all of them attach to), the key layout the lock-like
//!   ones share, and idempotency records.
//! - [`store`]: the only code that talks to Redis — connections, Lua scripts, pub/sub hub,
//!   `SCAN` pages over every master for listings.
//! - [`wait`]: the one blocking-wait engine every primitive uses (a local
//!   relay for interchangeable waiters, each waiter on its own ticket of
//!   a queue kept in Redis, one waiter watching several objects, or every
//!   waiter answered by one broadcast message).
//! - [`owner`]: the rules of an owner label, which the service checks and the
//!   client tools follow.
//! - [`counted`]: the user-counted map the hub and the engine keep their state in.
//! - [`metrics`], [`telemetry`]: Prometheus registry and JSON logs.
//! - [`devredis`]: private redis-server processes for dev mode, tests and the benchmark.
//! - [`cli`]: `latchkey` as a client: run a command under a lock, a read or
//!   write lock or semaphore permits; wait on or count down a latch; list
//!   objects (`ls`) or show one (`status`).
//! - [`child`]: child processes (dev-mode servers, the CLI's command).

pub mod app;
pub mod child;
pub mod cli;
pub mod config;
pub mod coord;
pub mod counted;
pub mod devredis;
pub mod error;
pub mod http;
pub mod metrics;
pub mod owner;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod wait;

/// The OpenAPI document as pretty JSON, exactly as committed in
/// `openapi/openapi.json`.
pub fn openapi_json() -> String {
    let mut text =
        serde_json::to_string_pretty(&http::openapi()).expect("the OpenAPI document serializes");
    text.push('\n');
    text
}
