//! The pub/sub hub: one dedicated subscriber connection per process.
//!
//! Design:
//! - The hub owns one connection that is never pooled (a subscribed
//!   connection can't run other commands, and blocking a shared
//!   multiplexed connection would stall everything on it).
//! - It subscribes exactly the channels that have local waiters, so an
//!   instance is sent only the messages it has a use for: a release that
//!   nobody waits on reaches no instance (with one pattern for every
//!   channel, every instance of a deployment was sent, and dropped, every
//!   release of every other one, and its own). A channel's first
//!   [`Subscription`] asks the hub's task to subscribe it, its last one's
//!   Drop to unsubscribe it; both only queue the channel's name (no
//!   await). The task reconciles each queued channel with its current
//!   users, so racing joins and leaves end in the right state, and sends
//!   a burst of them as one command. A waiter may check Redis before its
//!   channel is subscribed, so every confirmed subscription wakes the
//!   channel's waiters to check again: a message sent in between is not
//!   lost, the check after the confirmation sees what it announced.
//! - In-process fan-out: a map from channel to a reference-counted entry
//!   holding a `watch` of the latest [`Note`] (a counter and the message's
//!   payload, for waiters that read it) and a member count. A waiter marks the
//!   counter as seen *before* it re-checks Redis, so a message that arrives
//!   between the check and the wait is never lost. The last
//!   [`Subscription`] of a channel removes the entry (Drop).
//! - Reconnect with capped exponential backoff; a PING every few seconds
//!   detects a silently dead connection. Messages published while
//!   disconnected are lost, so on every (re)connect all waiters are woken to
//!   re-check, and every channel with waiters is subscribed again.
//! - A Redis user that may not `SUBSCRIBE` (an ACL written for the
//!   versions that subscribed by pattern, `+psubscribe` only) makes the
//!   hub fall back, with a warning, to one pattern subscription, `{prefix}*`,
//!   which covers every channel.
//!
//! On a Redis Cluster the scripts publish with `SPUBLISH` (see
//! [`super::scripts`]), and a message reaches only the shard that owns its
//! channel's slot. There the hub holds one cluster connection (RESP3,
//! messages arrive as pushes) and `SSUBSCRIBE`s the channels with local
//! waiters as above, each on its shard; the redis crate routes each by
//! slot and subscribes again by itself after a reconnect or a slot-map
//! change it knows of. It does not notice a replica promoted in place of a
//! dead master, nor keep a channel the server dropped because its slot
//! moved: so after a lost node connection the hub subscribes every channel
//! again (the command finds the shard's live node), and it answers a
//! `SUNSUBSCRIBE` it did not ask for by subscribing again (the crate
//! follows the redirect). There the confirmation is a push, which wakes
//! the channel's waiters, and a lost node connection wakes every waiter,
//! as a reconnect does above.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use redis::aio::{PubSubSink, PubSubStream};
use redis::{PushInfo, PushKind, Value};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::connector::{ClusterTarget, Connector};
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
    /// Channels whose first subscription came or whose last one left, for
    /// the task to (un)subscribe.
    changes: mpsc::UnboundedSender<String>,
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
        if self.hub.inner.channels.leave(&self.channel).is_some() {
            self.hub.changed(&self.channel);
        }
    }
}

impl Hub {
    /// Starts the hub's background task on `connector`: subscriptions of
    /// the channels with waiters (sharded on a cluster), or the one pattern
    /// `pattern` where Redis refuses them (see the module docs). It runs
    /// until `shutdown` is cancelled.
    pub fn start(
        connector: Connector,
        pattern: String,
        shutdown: CancellationToken,
        metrics: Metrics,
        connect_timeout: Duration,
    ) -> Hub {
        let (changes, changed) = mpsc::unbounded_channel();
        let hub = Hub {
            inner: Arc::new(Inner {
                channels: CountedMap::default(),
                connected: watch::Sender::new(false),
                changes,
            }),
        };
        match connector {
            Connector::Cluster(cluster) => {
                tokio::spawn(run_sharded(
                    hub.clone(),
                    cluster,
                    changed,
                    shutdown,
                    metrics,
                ));
            }
            connector => {
                let target = Direct {
                    connector,
                    pattern,
                    connect_timeout,
                };
                tokio::spawn(run(hub.clone(), target, changed, shutdown, metrics));
            }
        }
        hub
    }

    /// Registers interest in `channel`. Waiters on the same channel share
    /// one entry (and, process-wide, one Redis subscription).
    pub fn subscribe(&self, channel: &str) -> Subscription {
        let mut first = false;
        let tx = self.inner.channels.join(channel, || {
            first = true;
            Arc::new(watch::Sender::new(Note::default()))
        });
        if first {
            self.changed(channel);
        }
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

    /// Whether the subscriber connection is up right now: while it is not,
    /// wake messages are lost and waiters must look by themselves.
    pub fn is_connected(&self) -> bool {
        *self.inner.connected.borrow()
    }

    /// Channels with at least one subscription (gauges, tests).
    pub fn channels(&self) -> usize {
        self.inner.channels.len()
    }

    /// `channel` got its first subscription or lost its last.
    fn changed(&self, channel: &str) {
        // Fails only once the task has ended (shutdown).
        let _ = self.inner.changes.send(channel.to_string());
    }

    /// Wakes the waiters of one channel to re-check (its subscription was
    /// just confirmed).
    fn wake(&self, channel: &str) {
        self.inner.channels.with(channel, |tx| bump(tx, None));
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

/// Where the hub's task subscribes outside a cluster: one Redis
/// (standalone, or the master a Sentinel names).
struct Direct {
    connector: Connector,
    /// The pattern of every channel, for a user that may not `SUBSCRIBE`.
    pattern: String,
    connect_timeout: Duration,
}

/// Whether Redis refused a command to the user (`NOPERM`).
fn refused_by_acl(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm)
}

impl Direct {
    /// Connects and subscribes `channels` (or the pattern, where `SUBSCRIBE`
    /// is refused: then `by_pattern` becomes true, for good).
    async fn connect(
        &self,
        channels: &[String],
        by_pattern: &mut bool,
    ) -> redis::RedisResult<(PubSubSink, PubSubStream)> {
        // Resolved on every attempt: after a Sentinel failover this is the
        // new master.
        let pubsub = self.connector.client().await?.get_async_pubsub().await?;
        let (mut sink, stream) = pubsub.split();
        if !*by_pattern && !channels.is_empty() {
            match sink.subscribe(channels).await {
                Err(e) if refused_by_acl(&e) => *by_pattern = true,
                other => other?,
            }
        }
        if *by_pattern {
            sink.psubscribe(&self.pattern).await?;
        }
        Ok((sink, stream))
    }
}

/// Says, once, that the hub fell back to the pattern.
fn warn_pattern_fallback() {
    tracing::warn!(
        "Redis refused SUBSCRIBE to this user (NOPERM): pub/sub falls back to one pattern \
         subscription, so this instance is sent every release of the deployment; grant \
         +subscribe and +unsubscribe (see the book's \"Redis over TLS and with ACL users\")"
    );
}

/// The hub's task outside a cluster (see the module docs).
async fn run(
    hub: Hub,
    target: Direct,
    mut changed: mpsc::UnboundedReceiver<String>,
    shutdown: CancellationToken,
    metrics: Metrics,
) {
    let mut backoff = BACKOFF_START;
    let mut first = true;
    let mut by_pattern = false;
    while !shutdown.is_cancelled() {
        // Subscribing every channel with waiters now covers whatever
        // changed so far.
        while changed.try_recv().is_ok() {}
        let channels = hub.inner.channels.keys();
        let was_pattern = by_pattern;
        let attempt = tokio::select! {
            // Cancel-safe: dropping a half-made connection just closes it.
            _ = shutdown.cancelled() => return,
            r = tokio::time::timeout(target.connect_timeout, target.connect(&channels, &mut by_pattern)) => r,
        };
        if by_pattern && !was_pattern {
            warn_pattern_fallback();
        }
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

        // Channels asked for (and not given up since), channels to
        // reconcile with their users, and the batch under way (the next
        // one waits for it, so the commands of one channel reach Redis in
        // the order they were decided). The pattern covers every channel.
        let mut subscribed: HashSet<String> = match by_pattern {
            true => HashSet::new(),
            false => channels.into_iter().collect(),
        };
        let mut dirty: HashSet<String> = HashSet::new();
        let mut inflight: Option<BoxFuture<'static, redis::RedisResult<Vec<String>>>> = None;
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.tick().await;
        loop {
            if inflight.is_none() && !dirty.is_empty() {
                let batch = plan(&hub, &mut subscribed, dirty.drain(), false);
                if !batch.is_empty() {
                    inflight = Some(execute_direct(sink.clone(), batch));
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                Some(channel) = changed.recv() => {
                    if !by_pattern {
                        dirty.insert(channel);
                        // A burst (many new waiters) goes out as one command.
                        while let Ok(channel) = changed.try_recv() {
                            dirty.insert(channel);
                        }
                    }
                }
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
                done = async { inflight.as_mut().expect("guarded").await }, if inflight.is_some() => {
                    inflight = None;
                    match done {
                        // Waiters may have checked before it: make them look.
                        Ok(confirmed) => confirmed.iter().for_each(|channel| hub.wake(channel)),
                        // Subscribe by pattern from the next connection on.
                        Err(e) if refused_by_acl(&e) => {
                            by_pattern = true;
                            warn_pattern_fallback();
                            break;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "pub/sub SUBSCRIBE or UNSUBSCRIBE failed");
                            break;
                        }
                    }
                }
                _ = ping.tick() => {
                    // A connection can die without a FIN (network cut); a
                    // PING that gets no answer tells us to reconnect.
                    let pong = tokio::time::timeout(target.connect_timeout, sink.ping::<redis::Value>()).await;
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

/// Sends a batch on the subscriber connection: one `UNSUBSCRIBE` of the
/// channels given up, then one `SUBSCRIBE` of the new ones. Resolves to
/// the channels subscribed, once Redis confirmed every one.
fn execute_direct(
    mut sink: PubSubSink,
    batch: Vec<(String, Op)>,
) -> BoxFuture<'static, redis::RedisResult<Vec<String>>> {
    Box::pin(async move {
        let (subscribe, unsubscribe): (Vec<_>, Vec<_>) =
            batch.into_iter().partition(|(_, op)| *op == Op::Subscribe);
        let unsubscribe: Vec<String> = unsubscribe.into_iter().map(|(c, _)| c).collect();
        let subscribe: Vec<String> = subscribe.into_iter().map(|(c, _)| c).collect();
        // Neither is sent empty: without channels it means "all of them".
        if !unsubscribe.is_empty() {
            sink.unsubscribe(&unsubscribe).await?;
        }
        if !subscribe.is_empty() {
            sink.subscribe(&subscribe).await?;
        }
        Ok(subscribe)
    })
}

/// How soon after a lost node connection the hub subscribes its channels
/// again (the crate resubscribes by itself too, but only where its slot map
/// points; asking again also reaches a replica promoted meanwhile).
const RESYNC_AFTER: Duration = Duration::from_millis(200);

/// One (un)subscription of a channel by the hub's task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Subscribe,
    Unsubscribe,
}

/// A batch of (un)subscriptions under way, with each one's outcome.
type Batch = BoxFuture<'static, Vec<(String, Op, redis::RedisResult<()>)>>;

/// The hub's task on a Redis Cluster (see the module docs).
async fn run_sharded(
    hub: Hub,
    cluster: Arc<ClusterTarget>,
    mut changed: mpsc::UnboundedReceiver<String>,
    shutdown: CancellationToken,
    metrics: Metrics,
) {
    let (push_tx, mut pushes) = mpsc::unbounded_channel::<PushInfo>();
    let client = match cluster
        .builder()
        .use_protocol(redis::ProtocolVersion::RESP3)
        .push_sender(push_tx)
        .build()
    {
        Ok(client) => client,
        // Validated at start (`backend::open`); cannot happen.
        Err(e) => {
            tracing::error!(error = %e, "pub/sub: invalid Redis Cluster configuration");
            return;
        }
    };
    // The connection repairs itself once made; only the first one is ours
    // to retry.
    let mut backoff = BACKOFF_START;
    let conn = loop {
        let connect = Box::pin(client.get_async_connection());
        let attempt = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = tokio::time::timeout(cluster.discovery_timeout(), connect) => r,
        };
        match attempt {
            Ok(Ok(conn)) => break conn,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "pub/sub connect failed")
            }
            Err(_) => tracing::warn!(
                retry_in_ms = backoff.as_millis() as u64,
                "pub/sub connect timed out"
            ),
        }
        sleep_or_cancel(backoff, &shutdown).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    };
    metrics.pubsub_connected.set(1);
    hub.set_connected(true);
    tracing::info!("pub/sub connected to the cluster (sharded)");

    // Channels asked for (and not given up since): what Redis should have.
    let mut subscribed: HashSet<String> = HashSet::new();
    // Channels to reconcile with their users.
    let mut dirty: HashSet<String> = HashSet::new();
    // The batch under way; the next one waits for it, so the (un)subscribes
    // of one channel reach Redis in the order they were decided.
    let mut inflight: Option<Batch> = None;
    // No batch before this (after a failure, or to resync after a lost node).
    let mut not_before = Instant::now();
    // A resync is due: subscribe every channel again.
    let mut resync = false;
    backoff = BACKOFF_START;
    // Anything published before we could subscribe is unseen: make everyone look.
    hub.wake_all();
    loop {
        if inflight.is_none() && Instant::now() >= not_before {
            let again = std::mem::take(&mut resync);
            if again {
                dirty.extend(subscribed.iter().cloned());
            }
            let batch = plan(&hub, &mut subscribed, dirty.drain(), again);
            if !batch.is_empty() {
                inflight = Some(execute(conn.clone(), batch));
            }
        }
        let waiting = inflight.is_none() && (!dirty.is_empty() || resync);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            Some(channel) = changed.recv() => {
                dirty.insert(channel);
                // A burst (many new waiters) goes out as one batch.
                while let Ok(channel) = changed.try_recv() {
                    dirty.insert(channel);
                }
            }
            Some(push) = pushes.recv() => match push.kind {
                PushKind::SMessage => {
                    if let [Value::BulkString(channel), Value::BulkString(payload), ..] = push.data.as_slice() {
                        metrics.pubsub_messages.inc();
                        hub.notify(&String::from_utf8_lossy(channel), payload);
                    }
                }
                // Ours, or the crate's own after a reconnect or a slot-map
                // change: waiters may have checked before it, or missed a
                // message while it was away.
                PushKind::SSubscribe => {
                    if let Some(Value::BulkString(channel)) = push.data.first() {
                        hub.wake(&String::from_utf8_lossy(channel));
                    }
                }
                // Ours, or the server's own when the channel's slot moved
                // to another node: then subscribe again (the crate finds
                // the new owner) and let its waiters look meanwhile.
                PushKind::SUnsubscribe => {
                    if let Some(Value::BulkString(channel)) = push.data.first() {
                        let channel = String::from_utf8_lossy(channel).into_owned();
                        if hub.inner.channels.users(&channel) > 0 {
                            hub.wake(&channel);
                            subscribed.remove(&channel);
                            dirty.insert(channel);
                        }
                    }
                }
                PushKind::Disconnection => {
                    tracing::warn!("pub/sub lost a cluster node connection; waking every waiter to re-check");
                    metrics.pubsub_connected.set(0);
                    metrics.pubsub_reconnects.inc();
                    hub.set_connected(false);
                    hub.wake_all();
                    resync = true;
                    not_before = Instant::now() + RESYNC_AFTER;
                }
                _ => {}
            },
            done = async { inflight.as_mut().expect("guarded").await }, if inflight.is_some() => {
                inflight = None;
                let mut failed = false;
                for (channel, op, result) in done {
                    match (op, result) {
                        // Its confirmation push wakes the waiters.
                        (Op::Subscribe, Ok(())) => {}
                        (Op::Subscribe, Err(e)) => {
                            tracing::warn!(error = %e, channel, "pub/sub SSUBSCRIBE failed; will retry");
                            subscribed.remove(&channel);
                            dirty.insert(channel);
                            failed = true;
                        }
                        (Op::Unsubscribe, Err(e)) => {
                            tracing::debug!(error = %e, channel, "pub/sub SUNSUBSCRIBE failed; will retry");
                            subscribed.insert(channel.clone());
                            dirty.insert(channel);
                            failed = true;
                        }
                        (Op::Unsubscribe, Ok(())) => {}
                    }
                }
                if failed {
                    not_before = Instant::now() + backoff;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                } else {
                    backoff = BACKOFF_START;
                }
            }
            _ = tokio::time::sleep_until(not_before), if waiting && Instant::now() < not_before => {}
        }
        // Up again once every channel is subscribed after a lost node
        // connection (at once if there was none to subscribe).
        if resync && subscribed.is_empty() && dirty.is_empty() {
            resync = false;
        }
        if !resync && inflight.is_none() && dirty.is_empty() && !*hub.inner.connected.borrow() {
            tracing::info!("pub/sub re-subscribed every channel");
            metrics.pubsub_connected.set(1);
            hub.set_connected(true);
        }
    }
}

/// What to do for `channels`: subscribe those with users that are not
/// subscribed (`again`: all those with users), unsubscribe those without
/// users that are.
fn plan(
    hub: &Hub,
    subscribed: &mut HashSet<String>,
    channels: impl Iterator<Item = String>,
    again: bool,
) -> Vec<(String, Op)> {
    channels
        .filter_map(|channel| {
            let wanted = hub.inner.channels.users(&channel) > 0;
            if wanted && (again || !subscribed.contains(&channel)) {
                subscribed.insert(channel.clone());
                Some((channel, Op::Subscribe))
            } else if !wanted && subscribed.remove(&channel) {
                Some((channel, Op::Unsubscribe))
            } else {
                None
            }
        })
        .collect()
}

/// Sends a batch, one command per channel (channels of different slots
/// may live on different shards), all at once on the multiplexed
/// connection.
fn execute(conn: redis::cluster_async::ClusterConnection, batch: Vec<(String, Op)>) -> Batch {
    Box::pin(futures_util::future::join_all(batch.into_iter().map(
        move |(channel, op)| {
            let mut conn = conn.clone();
            async move {
                let result = match op {
                    Op::Subscribe => conn.ssubscribe(&channel).await,
                    Op::Unsubscribe => conn.sunsubscribe(&channel).await,
                };
                (channel, op, result)
            }
        },
    )))
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

/// A hub on `connector` (channels `t:*`), once its connection is up.
#[cfg(test)]
async fn connected_hub(connector: Connector) -> Hub {
    let hub = Hub::start(
        connector,
        "t:*".into(),
        CancellationToken::new(),
        Metrics::new(),
        Duration::from_millis(500),
    );
    tokio::time::timeout(Duration::from_secs(5), hub.connected().wait_for(|up| *up))
        .await
        .expect("connected within 5 s")
        .expect("the hub runs");
    hub
}

/// Subscribes one channel per name at once (a burst of new waiters) and
/// waits until each has been woken, which its confirmation does. A note's
/// seq starts at 0 and every wake-up bumps it; a receiver made after the
/// confirmation already sees it (`wait_for` looks at the current note
/// first), as a waiter's check after it would.
#[cfg(test)]
async fn woken_burst(hub: &Hub, names: impl Iterator<Item = String>) -> Vec<Subscription> {
    let subscriptions: Vec<Subscription> = names.map(|name| hub.subscribe(&name)).collect();
    let mut receivers: Vec<_> = subscriptions.iter().map(Subscription::receiver).collect();
    for (i, rx) in receivers.iter_mut().enumerate() {
        tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|note| note.seq > 0))
            .await
            .unwrap_or_else(|_| panic!("channel {i}: no wake-up at its confirmation"))
            .expect("the hub runs");
    }
    subscriptions
}

#[cfg(test)]
mod direct_tests {
    use super::*;
    use crate::devredis::RedisServer;

    async fn numsub(conn: &mut redis::aio::MultiplexedConnection, channel: &str) -> i64 {
        let (_, n): (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query_async(conn)
            .await
            .unwrap();
        n
    }

    /// A waiter may have checked Redis before its channel was subscribed:
    /// the confirmation itself must make it look again (no lost wake-up),
    /// for every channel of a burst of new ones; a message then reaches
    /// its channel with its payload, and a channel nobody waits on any
    /// more is given up.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_confirmed_subscription_wakes_its_waiters_and_the_last_leaving_unsubscribes() {
        let server = RedisServer::start().expect("redis starts");
        let hub = connected_hub(Connector::Direct(Box::new(server.client()))).await;
        let mut conn = server
            .client()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let subscriptions = woken_burst(&hub, (0..100).map(|i| format!("t:{i}:wake"))).await;
        for i in 0..100 {
            let channel = format!("t:{i}:wake");
            assert_eq!(numsub(&mut conn, &channel).await, 1, "{channel}");
        }
        let mut rx = subscriptions[7].receiver();
        let heard: i64 = redis::cmd("PUBLISH")
            .arg("t:7:wake")
            .arg("free")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(heard, 1, "one subscriber: the hub");
        let message = rx.wait_for(|note| note.payload.as_deref() == Some("free"));
        tokio::time::timeout(Duration::from_secs(2), message)
            .await
            .expect("the message arrives")
            .unwrap();
        drop(subscriptions);
        let started = std::time::Instant::now();
        loop {
            let left: Vec<String> = redis::cmd("PUBSUB")
                .arg("CHANNELS")
                .arg("t:*")
                .query_async(&mut conn)
                .await
                .unwrap();
            if left.is_empty() {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "still subscribed with nobody waiting: {} channels",
                left.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(hub.channels(), 0);
    }
}

#[cfg(test)]
mod sharded_tests {
    use super::*;
    use crate::config::RedisMode;
    use crate::devredis::RedisCluster;
    use crate::store::backend::{self, Target};
    use crate::store::tls::RedisTls;

    async fn cluster_hub(cluster: &RedisCluster) -> Hub {
        let urls = cluster.urls();
        let (_, connector) = backend::open(&Target {
            mode: RedisMode::Cluster,
            urls: &urls,
            tls: &RedisTls::default(),
            sentinel_master: "",
            connections: 1,
            connect_timeout: Duration::from_millis(500),
            response_timeout: Duration::from_secs(1),
            dedicated_writes: false,
        })
        .expect("a cluster connector");
        connected_hub(connector).await
    }

    /// A waiter may have checked Redis before its channel was subscribed:
    /// the confirmation itself must make it look again (no lost wake-up),
    /// for every channel of a burst of new ones.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_cluster_each_confirmed_subscription_wakes_its_waiters() {
        let cluster = RedisCluster::start(3).expect("cluster starts");
        let hub = cluster_hub(&cluster).await;
        let names = (0..100).map(|i| format!("t:{{n{i}}}:wake"));
        let subscriptions = woken_burst(&hub, names).await;
        // And a message on a subscribed channel reaches it with its payload.
        let mut rx = subscriptions[7].receiver();
        let mut conn = redis::cluster::ClusterClient::new(cluster.urls())
            .unwrap()
            .get_async_connection()
            .await
            .unwrap();
        // A wake-up is not proof of the subscription: a lost node
        // connection also wakes every channel (and re-subscribes them), so
        // the message is sent again until the shard has its subscriber.
        let started = std::time::Instant::now();
        loop {
            let heard: i64 = redis::cmd("SPUBLISH")
                .arg("t:{n7}:wake")
                .arg("free")
                .query_async(&mut conn)
                .await
                .unwrap();
            if heard == 1 {
                break;
            }
            assert_eq!(heard, 0, "at most one shard subscriber");
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "the channel was never subscribed on its shard"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let message = rx.wait_for(|note| note.payload.as_deref() == Some("free"));
        tokio::time::timeout(Duration::from_secs(2), message)
            .await
            .expect("the message arrives")
            .unwrap();
    }
}
