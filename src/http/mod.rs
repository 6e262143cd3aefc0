//! The HTTP surface: one module per resource, the route list and its
//! layers ([`router`]), the OpenAPI document, extractors, and the
//! long-poll/SSE adapter.

pub mod access;
pub mod console;
pub mod extract;
pub mod fair_locks;
pub mod health;
pub mod latches;
pub mod listings;
pub mod lock_family;
pub mod locks;
pub mod longpoll;
pub mod middleware;
pub mod multilocks;
mod openapi;
pub mod problems;
pub mod ratelimiters;
pub mod redlocks;
pub(crate) mod responses;
mod router;
pub mod rwlocks;
pub mod semaphores;
pub mod sessions;
pub mod whoami;

pub use router::{Service, openapi, router};
