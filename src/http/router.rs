//! The one place that lists every route, and the router with every layer.
//!
//! Routes are registered through utoipa-axum, so the OpenAPI document is
//! generated from the same list and cannot drift from what is served.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue, Method, header};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::cors::{AllowOrigin, Any, CorsLayer};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_swagger_ui::SwaggerUi;

use super::middleware::{self, REQUEST_ID};
use super::openapi::{ApiDoc, polish, with_bounds, without_security};
use super::{
    fair_locks, health, latches, locks, multilocks, ratelimiters, redlocks, rwlocks, semaphores,
};
use crate::config::{Config, CorsOrigins};
use crate::state::AppState;

/// Sent by clients that retry non-idempotent requests safely, e.g. a
/// latch's count-down (browsers must be allowed to send it and to read it
/// back).
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// Every route with its OpenAPI operation.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(locks::acquire))
        .routes(routes!(locks::heartbeat))
        .routes(routes!(locks::release))
        .routes(routes!(locks::state, locks::force_unlock))
        .routes(routes!(fair_locks::acquire))
        .routes(routes!(fair_locks::heartbeat))
        .routes(routes!(fair_locks::release))
        .routes(routes!(fair_locks::state, fair_locks::force_unlock))
        .routes(routes!(multilocks::acquire))
        .routes(routes!(multilocks::heartbeat))
        .routes(routes!(multilocks::release))
        .routes(routes!(rwlocks::acquire_read))
        .routes(routes!(rwlocks::acquire_write))
        .routes(routes!(rwlocks::heartbeat))
        .routes(routes!(rwlocks::release))
        .routes(routes!(rwlocks::state, rwlocks::force_unlock))
        .routes(routes!(
            semaphores::configure,
            semaphores::state,
            semaphores::force_unlock
        ))
        .routes(routes!(semaphores::acquire))
        .routes(routes!(semaphores::heartbeat))
        .routes(routes!(semaphores::release))
        .routes(routes!(redlocks::acquire))
        .routes(routes!(redlocks::heartbeat))
        .routes(routes!(redlocks::release))
        .routes(routes!(redlocks::state))
        .routes(routes!(latches::set, latches::state, latches::delete))
        .routes(routes!(latches::count_down))
        .routes(routes!(latches::wait))
        .routes(routes!(
            ratelimiters::configure,
            ratelimiters::state,
            ratelimiters::delete
        ))
        .routes(routes!(ratelimiters::acquire))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(health::metrics))
}

/// The API routes (without the layers, Swagger UI and fallbacks) and the
/// document describing them with this configuration's bounds (and without
/// the API-key requirement when no key is configured).
fn api_router(config: &Config, open: bool) -> (Router<AppState>, serde_json::Value) {
    let (router, doc) = routes().split_for_parts();
    let doc = with_bounds(polish(doc), config);
    (router, if open { without_security(doc) } else { doc })
}

/// The router with every layer: body limit, panic catching, one
/// [`middleware::observe`] layer (request id, tracing span, metrics,
/// problem+json for errors), CORS, Swagger UI and fallbacks.
pub fn router(state: AppState) -> Router {
    let (api, openapi) = api_router(&state.config, state.keys.open());
    let swagger = SwaggerUi::new("/docs")
        .external_url_unchecked("/openapi.json", openapi)
        .config(utoipa_swagger_ui::Config::default().validator_url("none"));
    let metrics = state.metrics.clone();
    let config = state.config.clone();

    let mut app = api
        .fallback(middleware::not_found)
        .with_state(state)
        .merge(swagger)
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        // A bug must still answer (500 `internal`, detail not leaked)
        // rather than drop the connection.
        .layer(CatchPanicLayer::custom(middleware::panic_response))
        .layer(axum::middleware::from_fn_with_state(
            metrics,
            middleware::observe,
        ));

    let exposed = [
        header::LOCATION,
        header::RETRY_AFTER,
        REQUEST_ID,
        IDEMPOTENCY_KEY,
        header::WWW_AUTHENTICATE,
    ];
    let cors = match &config.cors_origins {
        CorsOrigins::Disabled => None,
        CorsOrigins::Any => Some(CorsLayer::new().allow_origin(Any)),
        CorsOrigins::List(list) => Some(CorsLayer::new().allow_origin(AllowOrigin::list(
            list.iter().filter_map(|o| HeaderValue::from_str(o).ok()),
        ))),
    };
    if let Some(cors) = cors {
        app = app.layer(
            cors.allow_methods([Method::GET, Method::POST, Method::PUT, Method::DELETE])
                .allow_headers([
                    header::CONTENT_TYPE,
                    header::ACCEPT,
                    // API keys (README "API keys and namespaces").
                    header::AUTHORIZATION,
                    REQUEST_ID,
                    IDEMPOTENCY_KEY,
                ])
                .expose_headers(exposed),
        );
    }
    app
}
