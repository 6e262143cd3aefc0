//! The operator console (the book's "The console" (docs/src/console.md)): one
//! HTML page, its script and its style sheet, compiled into the binary. The
//! page itself needs no key, like Swagger UI at `/docs`; every call it makes
//! for data goes to the API with the key the operator gives it, so it sees
//! exactly what that key may see.
//!
//! The page loads nothing from another host and runs under a
//! Content-Security-Policy that allows only this origin (no inline script
//! or style), so text shown on it (owner labels are anyone's text) can
//! never run as code.

use axum::Router;
use axum::http::{HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The page's path; its assets are served under it.
pub const PATH: &str = "/console";

const PAGE: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/console.js");
const STYLE: &str = include_str!("console/console.css");
const ICON: &str = include_str!("console/icon.svg");

/// This origin only: the page, its script, its style and its API calls.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                   img-src 'self'; connect-src 'self'; base-uri 'none'; \
                   form-action 'none'; frame-ancestors 'none'";

/// The console's routes, outside the OpenAPI document (as `/docs` is).
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(PATH, get(page))
        .route("/console/console.js", get(script))
        .route("/console/console.css", get(style))
        .route("/console/icon.svg", get(icon))
}

async fn page() -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

async fn icon() -> Response {
    asset("image/svg+xml", ICON)
}

/// One asset with the headers every console response carries. `no-cache`:
/// a browser revalidates, so a new binary's page is never mixed with an
/// old script.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (
            HeaderName::from_static("x-frame-options"),
            HeaderValue::from_static("DENY"),
        ),
    ];
    (headers, body).into_response()
}
