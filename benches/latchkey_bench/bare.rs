//! The HTTP ceiling: the benchmark re-executes itself with [`MARKER`] to
//! serve one bare axum route on the default tokio runtime, pinned like the
//! service. Whatever latchkey adds (routing, layers, JSON, Redis) shows up
//! as the gap between its `/healthz` and this route. Three more routes
//! give the parked-waiter reference and the bare fan-out (the HTTP ceiling
//! of a latch fan-out): `GET /park` waits until `GET /unpark`, and
//! `GET /parked` counts the requests waiting. Two more are the HTTP
//! ceiling of a lock handoff ([`handoff`]): one lock in this process's
//! memory, taken by `GET /handoff/acquire` (which waits while it is held)
//! and freed by `GET /handoff/release`, which wakes exactly one waiter.
//!
//! Given a Redis URL after [`MARKER`], it also serves the **stack floor**
//! ([`stack`]): plain-lock acquire and release routes that make one script call
//! (`FCALL`, as the service makes it) of latchkey's own lock scripts each through redis-rs, and nothing else
//! of latchkey. The gap between latchkey's pairs and these is latchkey's
//! own code; the gap between these and the scripts called straight on
//! Redis is what axum and redis-rs cost.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::{Json, Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use redis::aio::MultiplexedConnection;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::client::LEASE_MS;
use crate::floors::{Scripts, token};

/// First argument that turns this process into the bare server.
pub const MARKER: &str = "--latchkey-bench-bare-server";

/// Serves `GET /` → "hello" on a free loopback port (and the stack floor
/// when a Redis URL follows the marker), printing `listening ADDR` on
/// stdout; exits when stdin closes (the benchmark ended, however it
/// ended).
pub fn serve() -> std::process::ExitCode {
    let redis_url = std::env::args().nth(2);
    std::thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        std::process::exit(0);
    });
    let runtime = tokio::runtime::Runtime::new().expect("cannot build the tokio runtime");
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("cannot bind the bare server");
        let addr = listener.local_addr().expect("no local address");
        let mut stdout = std::io::stdout();
        let _ = writeln!(stdout, "listening {addr}");
        let _ = stdout.flush();
        let mut router = Router::new()
            .route("/", get(|| async { "hello" }))
            .route("/park", get(park))
            .route("/unpark", get(|| async { GATE.notify_waiters() }))
            .route(
                "/parked",
                get(|| async { PARKED.load(Ordering::Relaxed).to_string() }),
            )
            .route("/handoff/acquire", get(handoff::acquire))
            .route("/handoff/release", get(handoff::release));
        if let Some(url) = redis_url {
            router = router.merge(stack::router(&url).await);
        }
        axum::serve(listener, router)
            .await
            .expect("bare server failed");
    });
    std::process::ExitCode::SUCCESS
}

/// Requests waiting in `/park`, and what releases them.
static PARKED: AtomicUsize = AtomicUsize::new(0);
static GATE: Notify = Notify::const_new();

/// Waits until `/unpark`.
async fn park() -> &'static str {
    let open = GATE.notified();
    PARKED.fetch_add(1, Ordering::Relaxed);
    open.await;
    PARKED.fetch_sub(1, Ordering::Relaxed);
    "unparked"
}

/// The bare handoff: a lock handoff with nothing but HTTP, the hops a
/// latchkey handoff makes besides Redis (the release's request and reply,
/// one parked request woken, its reply). The lock is a flag and a grant
/// counter in this process's memory; a release wakes exactly one waiting
/// request (wake-one, no herd), which takes the lock if nobody took it
/// first, and otherwise waits again. Its grant number plays the fencing
/// token's part in the pairing of the handoff runs.
mod handoff {
    use std::sync::Mutex;

    use tokio::sync::Notify;

    /// Whether the lock is held, and how many grants it made.
    static LOCK: Mutex<(bool, u64)> = Mutex::new((false, 0));
    static FREED: Notify = Notify::const_new();

    /// Waits until the lock is free, takes it, and answers the grant's
    /// number.
    pub async fn acquire() -> String {
        loop {
            // Registered before the look, so that a release between the
            // look and the wait is not missed.
            let freed = FREED.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut lock = LOCK.lock().expect("the bare lock is poisoned");
                if !lock.0 {
                    lock.0 = true;
                    lock.1 += 1;
                    return lock.1.to_string();
                }
            }
            freed.await;
        }
    }

    /// Frees the lock and wakes one waiter.
    pub async fn release() -> &'static str {
        LOCK.lock().expect("the bare lock is poisoned").0 = false;
        FREED.notify_one();
        "released"
    }
}

/// The stack floor: latchkey's plain-lock routes as thin as axum and
/// redis-rs make them, over two sets of scripts ([`STACK_FLOORS`]):
/// `POST /{route}/{name}/acquire` with latchkey's body (`holder`,
/// `lease_ms`) runs the acquire script with the keys and arguments the
/// floor passes, on ONE multiplexed connection shared by every request (as
/// the service shares a few), and answers 201 with the grant as JSON;
/// `DELETE /{route}/{name}/holders/{holder}` runs its release script and
/// answers 200. What latchkey does besides is left out: API keys and
/// namespaces, the request's labels and metrics, a random attempt id, the
/// undo guard, the heartbeat interval, `Location`, the problem bodies.
///
/// With the lock's own scripts, an acquire with `wait_ms` waits as a
/// long-poll (the stack handoff, [`crate::handoff`]): when refused, it
/// waits for a message on the lock's wake channel (which the release
/// script publishes when the lock becomes free) and tries again, until
/// `wait_ms` ends (409). The channel is subscribed on one pub/sub
/// connection of the server when its first waiter comes, and each message
/// wakes exactly one waiter of that lock ([`Wakes`]).
mod stack {
    use super::*;
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use axum::http::HeaderName;
    use axum::http::header::CONTENT_TYPE;
    use futures_util::StreamExt;
    use redis::aio::PubSubSink;
    use tokio::sync::OnceCell;

    use crate::floors::{Floor, STACK_FLOORS, lock_channel};

    #[derive(Clone)]
    struct Stack {
        scripts: Scripts,
        conn: MultiplexedConnection,
        /// Where long-polls wait (None: this floor answers at once).
        wakes: Option<Arc<Wakes>>,
    }

    /// The long-polls' wake-ups: a channel's waiters and whether its
    /// subscription is confirmed. Channels are never unsubscribed: the
    /// benchmark's handoff locks are each used for one run.
    struct Wakes {
        sink: PubSubSink,
        channels: Mutex<HashMap<String, Arc<Channel>>>,
    }

    #[derive(Default)]
    struct Channel {
        subscribed: OnceCell<()>,
        /// Notified once per message: wakes one waiter.
        message: Notify,
    }

    impl Wakes {
        /// Connects the pub/sub connection and spawns its reader.
        async fn start(client: &redis::Client) -> Arc<Wakes> {
            let (sink, mut stream) = (client.get_async_pubsub().await)
                .expect("the stack floor cannot open its pub/sub connection")
                .split();
            let wakes = Arc::new(Wakes {
                sink,
                channels: Mutex::new(HashMap::new()),
            });
            let reader = wakes.clone();
            tokio::spawn(async move {
                while let Some(message) = stream.next().await {
                    let channel = reader.channel(message.get_channel_name());
                    channel.message.notify_one();
                }
            });
            wakes
        }

        fn channel(&self, name: &str) -> Arc<Channel> {
            let mut channels = self
                .channels
                .lock()
                .expect("the wake channels are poisoned");
            channels.entry(name.to_owned()).or_default().clone()
        }

        /// The channel, subscribed (every caller waits for the one
        /// confirmation).
        async fn subscribed(&self, name: &str) -> Result<Arc<Channel>, String> {
            let channel = self.channel(name);
            let subscribe = || async {
                let mut sink = self.sink.clone();
                (sink.subscribe(name).await).map_err(|e| format!("SUBSCRIBE {name}: {e}"))
            };
            channel.subscribed.get_or_try_init(subscribe).await?;
            Ok(channel)
        }
    }

    /// An attempt id per acquire, as the service makes one (a counter
    /// here, not a random id).
    static ATTEMPTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    #[derive(Deserialize)]
    struct Acquire {
        holder: String,
        lease_ms: u64,
        #[serde(default)]
        wait_ms: u64,
    }

    #[derive(Serialize)]
    struct Grant<'a> {
        name: &'a str,
        holder: &'a str,
        /// Redisson's lock has none.
        fencing_token: Option<u64>,
        lease_ms: u64,
    }

    type Answer = (StatusCode, Json<serde_json::Value>);

    fn refused(status: StatusCode, what: String) -> Answer {
        (status, Json(serde_json::json!({ "error": what })))
    }

    pub async fn router(redis_url: &str) -> Router {
        let client = redis::Client::open(redis_url).expect("the stack floor's Redis URL");
        let conn = (client.get_multiplexed_async_connection().await)
            .expect("the stack floor cannot connect to Redis");
        let wakes = Wakes::start(&client).await;
        let mut router = Router::new();
        for floor in STACK_FLOORS {
            let stack = Stack {
                scripts: Scripts::of(floor),
                conn: conn.clone(),
                wakes: matches!(floor, Floor::Own(_)).then(|| wakes.clone()),
            };
            let route = floor.stack_route();
            router = router.merge(
                Router::new()
                    .route(&format!("{route}/{{name}}/acquire"), post(acquire))
                    .route(
                        &format!("{route}/{{name}}/holders/{{holder}}"),
                        delete(release),
                    )
                    .with_state(stack),
            );
        }
        router
    }

    async fn acquire(
        State(mut s): State<Stack>,
        Path(name): Path<String>,
        Json(body): Json<Acquire>,
    ) -> Result<(StatusCode, [(HeaderName, &'static str); 1], String), Answer> {
        // The floors' scripts take the benchmark's one lease.
        if body.lease_ms != LEASE_MS {
            return Err(refused(
                StatusCode::BAD_REQUEST,
                format!("lease_ms must be {LEASE_MS}"),
            ));
        }
        let channel = match (&s.wakes, body.wait_ms) {
            (_, 0) => None,
            (Some(wakes), _) => Some(
                (wakes.subscribed(&lock_channel(&name)).await)
                    .map_err(|e| refused(StatusCode::SERVICE_UNAVAILABLE, e))?,
            ),
            (None, _) => {
                return Err(refused(
                    StatusCode::BAD_REQUEST,
                    "this floor does not wait: wait_ms must be 0".to_string(),
                ));
            }
        };
        let deadline = Instant::now() + Duration::from_millis(body.wait_ms);
        let reply = loop {
            // Registered before the try, so that a release between the
            // try and the wait is not missed.
            let message = channel.as_ref().map(|c| c.message.notified());
            tokio::pin!(message);
            if let Some(message) = message.as_mut().as_pin_mut() {
                message.enable();
            }
            let n = ATTEMPTS.fetch_add(1, Ordering::Relaxed);
            let attempt = format!("{}.{n:x}", body.holder);
            let reply = (s
                .scripts
                .acquire(&mut s.conn, &name, &body.holder, &attempt)
                .await)
                .map_err(|e| refused(StatusCode::SERVICE_UNAVAILABLE, e))?;
            if s.scripts.floor().granted(&reply, &attempt) {
                break reply;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(message) = message.as_pin_mut().filter(|_| !left.is_zero()) else {
                return Err(refused(
                    StatusCode::CONFLICT,
                    format!("not granted: {reply:?}"),
                ));
            };
            let _ = tokio::time::timeout(left, message).await;
        };
        let grant = Grant {
            name: &name,
            holder: &body.holder,
            fencing_token: token(&reply),
            lease_ms: LEASE_MS,
        };
        let json = serde_json::to_string(&grant).expect("a grant serializes");
        Ok((
            StatusCode::CREATED,
            [(CONTENT_TYPE, "application/json")],
            json,
        ))
    }

    async fn release(
        State(mut s): State<Stack>,
        Path((name, holder)): Path<(String, String)>,
    ) -> Result<Json<serde_json::Value>, Answer> {
        (s.scripts.release(&mut s.conn, &name, &holder, "").await)
            .map_err(|e| refused(StatusCode::NOT_FOUND, e))?;
        Ok(Json(serde_json::json!({ "released": true })))
    }
}
