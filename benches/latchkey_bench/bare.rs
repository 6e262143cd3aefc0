//! The HTTP ceiling: the benchmark re-executes itself with [`MARKER`] to
//! serve one bare axum route on the default tokio runtime, pinned like the
//! service. Whatever latchkey adds (routing, layers, JSON, Redis) shows up
//! as the gap between its `/healthz` and this route. Three more routes
//! give the parked-waiter reference and the bare fan-out (the HTTP ceiling
//! of a latch fan-out): `GET /park` waits until `GET /unpark`, and
//! `GET /parked` counts the requests waiting.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::routing::get;
use tokio::sync::Notify;

/// First argument that turns this process into the bare server.
pub const MARKER: &str = "--latchkey-bench-bare-server";

/// Serves `GET /` → "hello" on a free loopback port, printing
/// `listening ADDR` on stdout; exits when stdin closes (the benchmark
/// ended, however it ended).
pub fn serve() -> std::process::ExitCode {
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
        let router = Router::new()
            .route("/", get(|| async { "hello" }))
            .route("/park", get(park))
            .route("/unpark", get(|| async { GATE.notify_waiters() }))
            .route(
                "/parked",
                get(|| async { PARKED.load(Ordering::Relaxed).to_string() }),
            );
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
