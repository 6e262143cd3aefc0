//! Prometheus metrics in the service's own registry.
//!
//! Label values are bounded sets only (route templates, primitives,
//! outcomes, script names): never object names or holder ids.

use std::sync::Arc;

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

/// Cheap to clone: one `Arc` inside (middleware state is cloned per
/// request). Derefs to the collectors.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<MetricsInner>,
}

impl std::ops::Deref for Metrics {
    type Target = MetricsInner;
    fn deref(&self) -> &MetricsInner {
        &self.inner
    }
}

pub struct MetricsInner {
    registry: Registry,
    /// Requests by method, matched route template and status code.
    pub http_requests: IntCounterVec,
    /// Time to the response head, by method and route (long-polls included).
    pub http_duration: HistogramVec,
    /// Acquisition attempts answered, by primitive (`lock`, `fair_lock`,
    /// `rwlock`, `semaphore`, `multilock`, `redlock`, `rate_limiter`) and outcome (`acquired`, `busy` (not granted, without
    /// waiting), `timeout`, `error`, `abandoned` (the client left while
    /// waiting), `refused` (e.g. `upgrade-would-deadlock`)). Latch waits
    /// (`/latches/{name}/wait`) count here too, as primitive `latch`, with
    /// `opened` in place of `acquired` (and `busy` for a closed latch
    /// looked at with `wait_ms` 0).
    pub acquisitions: IntCounterVec,
    /// Requests currently waiting (long-poll or SSE) on this instance.
    pub waiters: IntGauge,
    /// Objects with at least one waiter on this instance (each holds one
    /// in-process subscription); should fall back to 0 when waits end.
    pub waiting_objects: IntGauge,
    /// 1 while the pub/sub subscriber connection is up, else 0.
    pub pubsub_connected: IntGauge,
    /// Times the pub/sub connection had to be re-established.
    pub pubsub_reconnects: IntCounter,
    /// Pub/sub notifications received.
    pub pubsub_messages: IntCounter,
    /// Redis failures by kind (`io`, `timeout`, `pool` (no connection), `unavailable` (Redis refused: OOM, LOADING, ...), `server`, `replication`).
    pub redis_errors: IntCounterVec,
    /// Lua script round-trip latency by script.
    pub script_duration: HistogramVec,
    /// Calls to a RedLock node that failed or did not answer within the
    /// per-node timeout, by node index in `redlock_nodes` (from 0).
    pub redlock_node_errors: IntCounterVec,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let http_requests = IntCounterVec::new(
            Opts::new("latchkey_http_requests_total", "HTTP requests answered"),
            &["method", "route", "status"],
        )
        .expect("valid metric");
        let http_duration = HistogramVec::new(
            HistogramOpts::new(
                "latchkey_http_request_duration_seconds",
                "Time until the response head was ready (long-polls and SSE included)",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0, 60.0,
            ]),
            &["method", "route"],
        )
        .expect("valid metric");
        let acquisitions = IntCounterVec::new(
            Opts::new(
                "latchkey_acquisitions_total",
                "Acquisition requests answered, by primitive and outcome",
            ),
            &["primitive", "outcome"],
        )
        .expect("valid metric");
        let waiters = IntGauge::new(
            "latchkey_waiters",
            "Requests currently waiting on this instance",
        )
        .expect("valid metric");
        let waiting_objects = IntGauge::new(
            "latchkey_waiting_objects",
            "Objects with at least one waiter on this instance",
        )
        .expect("valid metric");
        let pubsub_connected = IntGauge::new(
            "latchkey_pubsub_connected",
            "1 while the pub/sub subscriber connection is up",
        )
        .expect("valid metric");
        let pubsub_reconnects = IntCounter::new(
            "latchkey_pubsub_reconnects_total",
            "Times the pub/sub connection was re-established",
        )
        .expect("valid metric");
        let pubsub_messages = IntCounter::new(
            "latchkey_pubsub_messages_total",
            "Pub/sub notifications received",
        )
        .expect("valid metric");
        let redis_errors = IntCounterVec::new(
            Opts::new("latchkey_redis_errors_total", "Redis failures by kind"),
            &["kind"],
        )
        .expect("valid metric");
        let script_duration = HistogramVec::new(
            HistogramOpts::new(
                "latchkey_script_duration_seconds",
                "Lua script round-trip latency",
            )
            .buckets(vec![
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                1.0, 2.5,
            ]),
            &["script"],
        )
        .expect("valid metric");

        let redlock_node_errors = IntCounterVec::new(
            Opts::new(
                "latchkey_redlock_node_errors_total",
                "RedLock node calls that failed or timed out, by node index",
            ),
            &["node"],
        )
        .expect("valid metric");

        for collector in [
            Box::new(http_requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(http_duration.clone()),
            Box::new(acquisitions.clone()),
            Box::new(waiters.clone()),
            Box::new(waiting_objects.clone()),
            Box::new(pubsub_connected.clone()),
            Box::new(pubsub_reconnects.clone()),
            Box::new(pubsub_messages.clone()),
            Box::new(redis_errors.clone()),
            Box::new(script_duration.clone()),
            Box::new(redlock_node_errors.clone()),
        ] {
            registry
                .register(collector)
                .expect("metric registered once");
        }

        Metrics {
            inner: Arc::new(MetricsInner {
                registry,
                http_requests,
                http_duration,
                acquisitions,
                waiters,
                waiting_objects,
                pubsub_connected,
                pubsub_reconnects,
                pubsub_messages,
                redis_errors,
                script_duration,
                redlock_node_errors,
            }),
        }
    }

    /// Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("text encoding cannot fail");
        String::from_utf8(buf).expect("prometheus text is UTF-8")
    }

    pub fn acquisition(&self, primitive: &str, outcome: &str) {
        self.acquisitions
            .with_label_values(&[primitive, outcome])
            .inc();
    }
}
