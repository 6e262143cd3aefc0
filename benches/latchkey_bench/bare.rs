//! The HTTP ceiling: the benchmark re-executes itself with [`MARKER`] to
//! serve one bare axum route on the default tokio runtime, pinned like the
//! service. Whatever latchkey adds (routing, layers, JSON, Redis) shows up
//! as the gap between its `/healthz` and this route. Three more routes
//! give the parked-waiter reference and the bare fan-out (the HTTP ceiling
//! of a latch fan-out): `GET /park` waits until `GET /unpark`, and
//! `GET /parked` counts the requests waiting.
//!
//! Given a Redis URL after [`MARKER`], it also serves the **stack floor**
//! ([`stack`]): plain-lock acquire and release routes that make one EVALSHA
//! of latchkey's own lock scripts each through redis-rs, and nothing else
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
            );
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
mod stack {
    use super::*;
    use axum::http::HeaderName;
    use axum::http::header::CONTENT_TYPE;

    use crate::floors::STACK_FLOORS;

    #[derive(Clone)]
    struct Stack {
        scripts: Scripts,
        conn: MultiplexedConnection,
    }

    /// An attempt id per acquire, as the service makes one (a counter
    /// here, not a random id).
    static ATTEMPTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    #[derive(Deserialize)]
    struct Acquire {
        holder: String,
        lease_ms: u64,
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
        let mut router = Router::new();
        for floor in STACK_FLOORS {
            let stack = Stack {
                scripts: Scripts::of(floor),
                conn: conn.clone(),
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
        let n = ATTEMPTS.fetch_add(1, Ordering::Relaxed);
        let attempt = format!("{}.{n:x}", body.holder);
        let reply = (s
            .scripts
            .acquire(&mut s.conn, &name, &body.holder, &attempt)
            .await)
            .map_err(|e| refused(StatusCode::SERVICE_UNAVAILABLE, e))?;
        if !s.scripts.floor().granted(&reply, &attempt) {
            return Err(refused(
                StatusCode::CONFLICT,
                format!("not granted: {reply:?}"),
            ));
        }
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
