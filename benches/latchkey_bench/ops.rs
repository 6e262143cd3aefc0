//! What the throughput rounds and the floors share: the [`Op`] a worker
//! runs in a loop, the [`Primitive`]s measured, and the size of the
//! semaphore kind's one semaphore.

use std::future::Future;
use std::time::Duration;

/// Permits of the semaphore kind's one semaphore: as many as the most
/// workers, so that none of them ever waits.
pub const SEM_PERMITS: usize = 64;

/// One operation of a worker; returns the latency of each of its steps.
pub trait Op: Send + 'static {
    fn run(&mut self) -> impl Future<Output = Result<Vec<Duration>, String>> + Send;
}

/// A primitive measured over HTTP (and, as a floor, by its own scripts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Primitive {
    Lock,
    ReadLock,
    Semaphore,
    FairLock,
}

impl Primitive {
    /// Every primitive, in the order its rounds run.
    pub const ALL: [Primitive; 4] = [
        Primitive::Lock,
        Primitive::ReadLock,
        Primitive::Semaphore,
        Primitive::FairLock,
    ];

    /// Its short name (columns, errors, CPU notes); plain locks keep the
    /// name of earlier runs.
    pub fn name(self) -> &'static str {
        match self {
            Primitive::Lock => "latchkey",
            Primitive::ReadLock => "read-lock",
            Primitive::Semaphore => "semaphore",
            Primitive::FairLock => "fair-lock",
        }
    }
}
