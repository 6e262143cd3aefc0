//! The pub/sub hub: one dedicated subscriber connection per process.
//!
//! Design:
//! - The hub owns one connection that is never pooled (a subscribed
//!   connection can't run other commands, and blocking a shared
//!   multiplexed connection would stall everything on it).
//! - It holds a single pattern subscription, `{prefix}*`, so subscribing a
//!   waiter is purely in-process: there is no SUBSCRIBE round trip and no
//!   window in which a new waiter's channel is not yet subscribed.
//!   Trade-off: every instance receives every notification of the
//!   deployment; notifications are tiny and only sent on state changes.
//! - In-process fan-out: a map from channel to a reference-counted entry
//!   holding a `watch` of the latest [`Note`] (a counter and the message's
//!   payload, for waiters that read it) and a member count. A waiter marks the
//!   counter as seen *before* it re-checks Redis, so a message that arrives
//!   between the check and the wait is never lost. The last
//!   [`Subscription`] of a channel removes the entry (Drop).
//! - Reconnect with capped exponential backoff; a PING every few seconds
//!   detects a silently dead connection. Messages published while
//!   disconnected are lost, so on every (re)connect all waiters are woken to
//!   re-check.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::backend::Connector;
use crate::counted::CountedMap;
use crate::metrics::Metrics;

const BACKOFF_START: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
const PING_EVERY: Duration = Duration::from_secs(5);

/// Cheap to clone: one `Arc` inside.
#[derive(Clone)]
pub struct Hub {
    inner: Arc<Inner>,
}

struct Inner {
    /// channel name → its latest note (bumped on every message for the
    /// channel and on every reconnect), counted by its [`Subscription`]s.
    channels: CountedMap<Arc<watch::Sender<Note>>>,
    /// True while the subscriber connection is up and subscribed.
    connected: watch::Sender<bool>,
}

/// The latest wake-up of a channel. Waiters that only need "something
/// happened" ignore the payload; the others read the latest one (a later
/// message supersedes an earlier one, so coalescing loses nothing).
#[derive(Debug, Clone, Default)]
pub struct Note {
    /// Bumped on every message and reconnect.
    pub seq: u64,
    /// The message's payload; `None` after a reconnect, when messages may
    /// have been lost and every waiter should look for itself.
    pub payload: Option<Arc<str>>,
}

fn bump(tx: &watch::Sender<Note>, payload: Option<Arc<str>>) {
    tx.send_modify(|n| {
        n.seq = n.seq.wrapping_add(1);
        n.payload = payload;
    });
}

/// One waiter-group's interest in a channel. Not Clone on purpose: each
/// one is counted once, and its Drop uncounts it.
pub struct Subscription {
    tx: Arc<watch::Sender<Note>>,
    channel: String,
    hub: Hub,
}

impl Subscription {
    /// A receiver positioned at the current note: `changed()` completes on
    /// the next notification (or reconnect).
    pub fn receiver(&self) -> watch::Receiver<Note> {
        self.tx.subscribe()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        drop(self.hub.inner.channels.leave(&self.channel));
    }
}

impl Hub {
    /// Starts the hub's background task on `client`. It runs until
    /// `shutdown` is cancelled.
    pub fn start(
        connector: Connector,
        pattern: String,
        shutdown: CancellationToken,
        metrics: Metrics,
        connect_timeout: Duration,
    ) -> Hub {
        let hub = Hub {
            inner: Arc::new(Inner {
                channels: CountedMap::default(),
                connected: watch::Sender::new(false),
            }),
        };
        tokio::spawn(run(
            hub.clone(),
            connector,
            pattern,
            shutdown,
            metrics,
            connect_timeout,
        ));
        hub
    }

    /// Registers interest in `channel`. Waiters on the same channel share
    /// one entry (and, process-wide, one Redis subscription).
    pub fn subscribe(&self, channel: &str) -> Subscription {
        let tx = self
            .inner
            .channels
            .join(channel, || Arc::new(watch::Sender::new(Note::default())));
        Subscription {
            tx,
            channel: channel.to_string(),
            hub: self.clone(),
        }
    }

    /// Whether the subscriber connection is up; `wait_for(|up| *up)` on it
    /// waits for the first subscription (tests, readiness).
    pub fn connected(&self) -> watch::Receiver<bool> {
        self.inner.connected.subscribe()
    }

    /// Channels with at least one subscription (gauges, tests).
    pub fn channels(&self) -> usize {
        self.inner.channels.len()
    }

    fn notify(&self, channel: &str, payload: &[u8]) {
        self.inner.channels.with(channel, |tx| {
            bump(tx, Some(String::from_utf8_lossy(payload).into()))
        });
    }

    fn wake_all(&self) {
        self.inner.channels.for_each(|tx| bump(tx, None));
    }

    fn set_connected(&self, up: bool) {
        self.inner
            .connected
            .send_if_modified(|c| std::mem::replace(c, up) != up);
    }
}

async fn run(
    hub: Hub,
    connector: Connector,
    pattern: String,
    shutdown: CancellationToken,
    metrics: Metrics,
    connect_timeout: Duration,
) {
    let mut backoff = BACKOFF_START;
    let mut first = true;
    while !shutdown.is_cancelled() {
        let connect = async {
            // Resolved on every attempt: after a Sentinel failover this is
            // the new master; in a cluster, the next node.
            let pubsub = connector.client().await?.get_async_pubsub().await?;
            let (mut sink, stream) = pubsub.split();
            sink.psubscribe(&pattern).await?;
            Ok::<_, redis::RedisError>((sink, stream))
        };
        let attempt = tokio::select! {
            // Cancel-safe: dropping a half-made connection just closes it.
            _ = shutdown.cancelled() => return,
            r = tokio::time::timeout(connect_timeout, connect) => r,
        };
        let (mut sink, mut stream) = match attempt {
            Ok(Ok(pair)) => pair,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "pub/sub connect failed");
                sleep_or_cancel(backoff, &shutdown).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
                continue;
            }
            Err(_) => {
                tracing::warn!(
                    retry_in_ms = backoff.as_millis() as u64,
                    "pub/sub connect timed out"
                );
                sleep_or_cancel(backoff, &shutdown).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
                continue;
            }
        };
        metrics.pubsub_connected.set(1);
        hub.set_connected(true);
        backoff = BACKOFF_START;
        if first {
            tracing::info!("pub/sub subscribed");
            first = false;
        } else {
            metrics.pubsub_reconnects.inc();
            tracing::info!("pub/sub re-subscribed; waking every waiter to re-check");
        }
        // Anything published while we were away is lost: make everyone look.
        hub.wake_all();

        let mut ping = tokio::time::interval(PING_EVERY);
        ping.tick().await;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                msg = stream.next() => match msg {
                    Some(msg) => {
                        metrics.pubsub_messages.inc();
                        hub.notify(msg.get_channel_name(), msg.get_payload_bytes());
                    }
                    None => {
                        tracing::warn!("pub/sub connection closed");
                        break;
                    }
                },
                _ = ping.tick() => {
                    // A connection can die without a FIN (network cut); a
                    // PING that gets no answer tells us to reconnect.
                    let pong = tokio::time::timeout(connect_timeout, sink.ping::<redis::Value>()).await;
                    if !matches!(pong, Ok(Ok(_))) {
                        tracing::warn!("pub/sub PING failed");
                        break;
                    }
                }
            }
        }
        metrics.pubsub_connected.set(0);
        hub.set_connected(false);
        // Waiters fall back to their own re-check timers while we reconnect.
        hub.wake_all();
    }
}

async fn sleep_or_cancel(d: Duration, shutdown: &CancellationToken) {
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = tokio::time::sleep(d) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wake-ups racing the last subscription of a channel leaving must
    /// not leave a dead entry behind (a slow leak: the old hub kept one for
    /// every channel dropped while a wake-up held it).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_channel_entry_outlives_its_subscriptions() {
        let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
        let hub = Hub::start(
            Connector::Direct(Box::new(client)),
            "t:*".into(),
            CancellationToken::new(),
            Metrics::new(),
            Duration::from_millis(50),
        );
        let _steady = hub.subscribe("t:steady");
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let notifier = {
            let (hub, done) = (hub.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    hub.wake_all();
                    hub.notify("t:steady", b"free");
                }
            })
        };
        for i in 0..50_000 {
            drop(hub.subscribe(&format!("t:{i}")));
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        notifier.join().unwrap();
        assert_eq!(hub.channels(), 1, "only the live subscription's entry");
    }
}
