//! Black-box tests of latchkey: the real app on port 0, against real
//! redis-server processes that the tests start themselves. No mocks.

mod access;
mod acl;
mod cli;
mod console;
mod errors;
mod fair;
mod hardening;
mod helpers;
mod latches;
mod listings;
mod locks;
mod model;
mod multilocks;
mod openapi;
mod ops;
mod owners;
mod owners_rw_sem;
mod queues;
mod ratelimit_attacks;
mod ratelimit_keys;
mod ratelimiters;
mod redlock;
mod rwlocks;
mod scripts;
mod secrets;
mod semaphores;
mod sessions;
mod sharded;
mod tls;
mod topologies;
mod waiting;
