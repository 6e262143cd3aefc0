//! The HTTP ceiling: the benchmark re-executes itself with [`MARKER`] to
//! serve one bare axum route on the default tokio runtime, pinned like the
//! service. Whatever latchkey adds (routing, layers, JSON, Redis) shows up
//! as the gap between its `/healthz` and this route.

use std::io::{Read, Write};

use axum::Router;
use axum::routing::get;

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
        let router = Router::new().route("/", get(|| async { "hello" }));
        axum::serve(listener, router)
            .await
            .expect("bare server failed");
    });
    std::process::ExitCode::SUCCESS
}
