//! Operations endpoints (the book's "Operations" (docs/src/operations.md)):
//! liveness, readiness, metrics.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::{ApiError, Problem};
use crate::state::AppState;

pub const TAG: &str = "operations";

#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"status": "ok"}))]
pub struct Health {
    pub status: &'static str,
}

/// Liveness: 200 whenever the process is serving.
#[utoipa::path(get, path = "/healthz", operation_id = "get_healthz", tag = TAG,
    responses((status = 200, description = "Alive", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// Readiness: 200 when Redis answers and the scripts are loaded.
#[utoipa::path(get, path = "/readyz", operation_id = "get_readyz", tag = TAG,
    responses(
        (status = 200, description = "Ready", body = Health),
        (status = 503, description = "Redis unreachable, scripts not loaded, or shutting down",
            body = Problem, content_type = "application/problem+json",
            examples(
                ("backend-unavailable" = (value = json!(crate::http::responses::examples::backend_unavailable()))),
                ("shutting-down" = (value = json!(crate::http::responses::examples::shutting_down()))),
            )),
    ))]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    if state.shutdown.is_cancelled() {
        return Err(ApiError::shutting_down());
    }
    state.store.check_ready().await?;
    Ok(Json(Health { status: "ready" }))
}

/// Prometheus metrics (text exposition format).
#[utoipa::path(get, path = "/metrics", operation_id = "get_metrics", tag = TAG,
    responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain")))]
pub async fn metrics(State(state): State<AppState>) -> Response {
    let mut response = state.metrics.render().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}
