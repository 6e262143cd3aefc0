//! Cross-cutting HTTP layers: problem+json for every error response, and
//! request metrics labelled by route template.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::{self, ApiError, PROBLEM_CONTENT_TYPE};
use crate::metrics::Metrics;

/// Rewrites error responses that did not come from our handlers (axum's
/// rejections, the method router's 405, body limits) into problem+json,
/// keeping their headers (e.g. `Allow` on 405).
pub async fn problem_json(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let is_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(PROBLEM_CONTENT_TYPE.as_bytes()));
    if is_problem {
        return response;
    }
    let (mut parts, _) = response.into_parts();
    let problem = error::for_status(status).into_response();
    let (problem_parts, body) = problem.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    for (name, value) in problem_parts.headers.iter() {
        parts.headers.insert(name.clone(), value.clone());
    }
    Response::from_parts(parts, body)
}

/// Counts requests and times them by method and matched route template
/// (never the raw path: it carries names and holder ids).
pub async fn record(State(metrics): State<Metrics>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let method = request.method().as_str().to_string();
    let method = match method.as_str() {
        "GET" | "HEAD" | "POST" | "PUT" | "DELETE" | "PATCH" | "OPTIONS" => method,
        _ => "other".to_string(),
    };
    let started = Instant::now();
    let response = next.run(request).await;
    metrics
        .http_duration
        .with_label_values(&[&method, &route])
        .observe(started.elapsed().as_secs_f64());
    metrics
        .http_requests
        .with_label_values(&[&method, &route, response.status().as_str()])
        .inc();
    response
}

/// Unknown routes.
pub async fn not_found() -> ApiError {
    ApiError::not_found("no such route; the API is described at /docs and /openapi.json")
}

/// The answer to a handler panic: logged, then a plain 500 `internal`.
pub fn panic_response(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let message = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("non-string panic");
    tracing::error!(panic = message, "handler panicked");
    ApiError::internal().into_response()
}
