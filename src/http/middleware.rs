//! Cross-cutting HTTP layers. [`observe`] is one middleware for what every
//! request needs after routing — a request id, the labels its log lines carry, metrics by
//! route template, panic catching and problem+json for error responses
//! that did not come from our handlers — so that a request pays for one
//! per-route layer, not five (see [`crate::http::router`]).

use std::panic::AssertUnwindSafe;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderName, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::FutureExt;

use crate::error::{self, ApiError, PROBLEM_CONTENT_TYPE};
use crate::metrics::Metrics;
use crate::telemetry::RequestLabels;

/// Correlates a request across services: kept if the client sent one,
/// generated (a UUID) otherwise, and echoed on the response.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Request id, log labels, metrics, panic catching and problem+json for
/// one request.
pub async fn observe(State(metrics): State<Metrics>, request: Request, next: Next) -> Response {
    let request_id = match request.headers().get(&REQUEST_ID) {
        Some(id) => id.clone(),
        None => {
            // Written in place (no `String`); nothing after this layer
            // reads the request's own header, so only the answer gets it.
            let mut text = [0; uuid::fmt::Hyphenated::LENGTH];
            let id = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut text);
            HeaderValue::from_str(id).expect("a UUID is a valid header value")
        }
    };
    // Route template only (never the raw path: it carries names and
    // holder ids).
    let matched = request.extensions().get::<MatchedPath>().cloned();
    let route = matched.as_ref().map_or("unmatched", MatchedPath::as_str);
    let method = method_label(request.method());
    // What names the request on its log lines: kept as it is, formatted
    // only if a line is written (see `telemetry`).
    let labels = RequestLabels {
        method,
        route: matched.clone(),
        request_id: request_id.clone(),
    };
    let started = Instant::now();
    // A bug must still answer (500 `internal`, detail not leaked) rather
    // than drop the connection; the panic is logged as the request's.
    let answered = AssertUnwindSafe(labels.clone().serve(next.run(request)))
        .catch_unwind()
        .await;
    let answered =
        answered.unwrap_or_else(|panic| labels.clone().in_scope(|| panic_response(panic)));
    let mut response = problem_json(answered);
    let elapsed = started.elapsed();
    let status = response.status();
    if status.is_server_error() {
        labels.in_scope(|| {
            tracing::error!(
                status = status.as_u16(),
                latency_ms = elapsed.as_millis() as u64,
                "response failed"
            )
        });
    }
    metrics
        .http_duration
        .with_label_values(&[method, route])
        .observe(elapsed.as_secs_f64());
    metrics
        .http_requests
        .with_label_values(&[method, route, status.as_str()])
        .inc();
    response.headers_mut().insert(REQUEST_ID, request_id);
    response
}

/// A bounded label for the method.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Rewrites error responses that did not come from our handlers (axum's
/// rejections, the method router's 405, body limits) into problem+json,
/// keeping their headers (e.g. `Allow` on 405).
fn problem_json(response: Response) -> Response {
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

/// Unknown routes.
pub async fn not_found() -> ApiError {
    ApiError::not_found("no such route; the API is described at /docs and /openapi.json")
}

/// The answer to a handler panic: logged, then a plain 500 `internal`.
fn panic_response(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let message = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("non-string panic");
    tracing::error!(panic = message, "handler panicked");
    ApiError::internal().into_response()
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    use super::*;

    /// A handler that panics still gets an answer: 500 `internal` as
    /// problem+json, with the request id, and the panic's message is not
    /// in the body.
    #[tokio::test]
    async fn a_panicking_handler_answers_500_internal() {
        async fn boom() -> &'static str {
            panic!("secret detail")
        }
        let app =
            Router::new()
                .route("/boom", get(boom))
                .layer(axum::middleware::from_fn_with_state(
                    Metrics::new(),
                    observe,
                ));
        let request = axum::http::Request::get("/boom")
            .body(Body::empty())
            .unwrap();
        let response = app.oneshot(request).await.unwrap();
        assert_eq!(response.status(), 500);
        assert!(response.headers().contains_key(&REQUEST_ID));
        let content_type = response.headers()[header::CONTENT_TYPE].clone();
        assert_eq!(content_type, PROBLEM_CONTENT_TYPE);
        let body = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .unwrap();
        let body = String::from_utf8_lossy(&body);
        assert!(body.contains("/problems/internal"), "{body}");
        assert!(!body.contains("secret"), "{body}");
    }
}
