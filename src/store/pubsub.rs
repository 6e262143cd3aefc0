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
//!   holding a `watch` counter. A waiter marks the counter as seen *before*
//!   it re-checks Redis, so a message that arrives between the check and
//!   the wait is never lost. The last [`Subscription`] of a channel removes
//!   the entry (Drop).
//! - Reconnect with capped exponential backoff; a PING every few seconds
//!   detects a silently dead connection. Messages published while
//!   disconnected are lost, so on every (re)connect all waiters are woken to
//!   re-check.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::backend::Connector;
use crate::metrics::Metrics;

const BACKOFF_START: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
const PING_EVERY: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct Hub {
    inner: Arc<HubInner>,
}

struct HubInner {
    /// channel name → live entry. Weak so that the map never keeps a
    /// channel alive; entries are removed by the last Subscription's Drop.
    channels: Mutex<HashMap<String, Weak<ChannelEntry>>>,
}

struct ChannelEntry {
    /// Bumped on every message for the channel and on every reconnect.
    tx: watch::Sender<u64>,
}

impl ChannelEntry {
    fn bump(&self) {
        self.tx.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// One waiter-group's interest in a channel. Cheap; not Clone on purpose
/// (the Drop bookkeeping counts owners through the Arc).
pub struct Subscription {
    entry: Arc<ChannelEntry>,
    channel: String,
    hub: Weak<HubInner>,
}

impl Subscription {
    /// A receiver positioned at the current message count: `changed()`
    /// completes on the next notification (or reconnect).
    pub fn receiver(&self) -> watch::Receiver<u64> {
        self.entry.tx.subscribe()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let Some(hub) = self.hub.upgrade() else {
            return;
        };
        let mut channels = hub.channels.lock().expect("hub map poisoned");
        // New strong references are only ever made under this lock, so if
        // ours is the last one, no one can be reviving the entry right now.
        let ours = channels
            .get(&self.channel)
            .is_some_and(|weak| weak.as_ptr() == Arc::as_ptr(&self.entry));
        if Arc::strong_count(&self.entry) == 1 && ours {
            channels.remove(&self.channel);
        }
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
        let inner = Arc::new(HubInner {
            channels: Mutex::new(HashMap::new()),
        });
        let hub = Hub { inner };
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
        let mut channels = self.inner.channels.lock().expect("hub map poisoned");
        let entry = match channels.get(channel).and_then(Weak::upgrade) {
            Some(entry) => entry,
            None => {
                let (tx, _) = watch::channel(0u64);
                let entry = Arc::new(ChannelEntry { tx });
                channels.insert(channel.to_string(), Arc::downgrade(&entry));
                entry
            }
        };
        Subscription {
            entry,
            channel: channel.to_string(),
            hub: Arc::downgrade(&self.inner),
        }
    }

    fn notify(&self, channel: &str) {
        let entry = {
            let channels = self.inner.channels.lock().expect("hub map poisoned");
            channels.get(channel).and_then(Weak::upgrade)
        };
        if let Some(entry) = entry {
            entry.bump();
        }
    }

    fn wake_all(&self) {
        let entries: Vec<Arc<ChannelEntry>> = {
            let channels = self.inner.channels.lock().expect("hub map poisoned");
            channels.values().filter_map(Weak::upgrade).collect()
        };
        for entry in entries {
            entry.bump();
        }
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
                        hub.notify(msg.get_channel_name());
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
