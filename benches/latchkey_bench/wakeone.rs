//! The handoff floor: the plain-lock handoff of [`crate::handoff`] done
//! straight on Redis, as a Redisson client does it. W waiter tasks fight
//! over one lock with latchkey's own plain-lock scripts (`FCALL` on one
//! multiplexed connection shared by all of them); ONE pub/sub connection
//! subscribes to the lock's wake channel, and each message (the release
//! script publishes one when the lock becomes free) wakes exactly one
//! waiting task, which then tries again: wake-one, no herd.
//!
//! Whoever is granted releases at once and then waits to be woken like
//! everyone else (it does not try again first, or it would re-win nearly
//! every time: its try needs no wake-up), so every handoff goes release
//! reply → message → one woken task → its try → grant. The log and the
//! pairing by fencing token are those of the HTTP runs. A waiter that
//! looked again by itself ([`RECHECK`], far longer than a handoff) and was
//! granted counts as a lost wake-up, which fails the run.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::floors::{self, Floor, Scripts};
use crate::handofflog::{Event, Shared};
use crate::ops::Primitive;

/// How long a waiter waits for a wake before it looks by itself.
pub const RECHECK: Duration = Duration::from_secs(2);

/// The lock the waiters fight over, and their way to Redis.
struct Lock {
    scripts: Scripts,
    conn: MultiplexedConnection,
    name: String,
    /// Notified once per wake message.
    wake: Notify,
}

/// Subscribes to lock `name`'s channel on a connection of its own (from
/// `url`) and spawns that subscriber and `waiters` waiters on `tasks`;
/// they run until `shared.stop`.
pub async fn spawn(
    tasks: &mut JoinSet<Result<(), String>>,
    shared: &Arc<Shared>,
    (url, conn): (&str, &MultiplexedConnection),
    name: String,
    waiters: usize,
) -> Result<(), String> {
    let client = redis::Client::open(url).map_err(|e| format!("redis URL {url}: {e}"))?;
    let mut pubsub =
        (client.get_async_pubsub().await).map_err(|e| format!("pub/sub connection: {e}"))?;
    let channel = floors::lock_channel(&name);
    (pubsub.subscribe(&channel).await).map_err(|e| format!("SUBSCRIBE {channel}: {e}"))?;
    let lock = Arc::new(Lock {
        scripts: Scripts::of(Floor::Own(Primitive::Lock)),
        conn: conn.clone(),
        name,
        wake: Notify::new(),
    });
    let (stop, wakes) = (shared.stop.clone(), lock.clone());
    tasks.spawn(async move {
        let mut messages = pubsub.into_on_message();
        loop {
            tokio::select! {
                message = messages.next() => match message {
                    Some(_) => wakes.wake.notify_one(),
                    None => return Err("the pub/sub connection closed".to_string()),
                },
                () = stop.cancelled() => return Ok(()),
            }
        }
    });
    for task in 0..waiters {
        tasks.spawn(waiter(shared.clone(), lock.clone(), task));
    }
    Ok(())
}

/// One waiter: try; when granted, log, release, log; then wait for a wake
/// (or [`RECHECK`]); until stopped.
async fn waiter(shared: Arc<Shared>, lock: Arc<Lock>, task: usize) -> Result<(), String> {
    let holder = format!("t{task}");
    let mut conn = lock.conn.clone();
    let (mut attempts, mut by_itself) = (0u64, false);
    while !shared.stop.is_cancelled() {
        attempts += 1;
        let attempt = format!("{holder}.{attempts:x}");
        let reply = (lock.scripts)
            .acquire(&mut conn, &lock.name, &holder, &attempt)
            .await?;
        match floors::token(&reply) {
            Some(token) => {
                if by_itself {
                    shared.timeouts.fetch_add(1, Ordering::Relaxed);
                }
                shared.log.record(Event::Granted { token, task });
                shared.log.record(Event::ReleaseSent(token));
                (lock.scripts)
                    .release(&mut conn, &lock.name, &holder, &attempt)
                    .await?;
                shared.log.record(Event::Released(token));
            }
            // {0, the holder's remaining lease, its owner labels}: wait.
            None if matches!(&reply, redis::Value::Array(a) if a.first() == Some(&redis::Value::Int(0))) =>
                {}
            None => return Err(format!("floor acquire replied {reply:?}")),
        }
        by_itself = tokio::select! {
            () = lock.wake.notified() => false,
            () = tokio::time::sleep(RECHECK) => true,
            () = shared.stop.cancelled() => break,
        };
    }
    Ok(())
}
