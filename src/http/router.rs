//! The one place that lists every route, and the router with every layer.
//!
//! Routes are registered through utoipa-axum, so the OpenAPI document is
//! generated from the same list and cannot drift from what is served.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue, Method, header};
use axum::response::Response;
use futures_util::FutureExt;
use futures_util::future::{Either, Map};
use tower::Layer;
use tower_http::cors::{AllowOrigin, Any, Cors, CorsLayer};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_swagger_ui::SwaggerUi;

use super::middleware::{self, REQUEST_ID};
use super::openapi::{ApiDoc, polish, with_bounds, without_security};
use super::{
    console, fair_locks, health, latches, listings, locks, multilocks, ratelimiters, redlocks,
    rwlocks, semaphores, sessions, whoami,
};
use crate::config::{Config, CorsOrigins};
use crate::state::AppState;

/// Sent by clients that retry non-idempotent requests safely, e.g. a
/// latch's count-down (browsers must be allowed to send it and to read it
/// back).
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// Every route with its OpenAPI operation.
fn routes() -> OpenApiRouter<AppState> {
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
        .routes(routes!(sessions::create))
        .routes(routes!(sessions::heartbeat))
        .routes(routes!(sessions::state, sessions::delete))
        .routes(routes!(latches::set, latches::state, latches::delete))
        .routes(routes!(latches::count_down))
        .routes(routes!(latches::wait))
        .routes(routes!(
            ratelimiters::configure,
            ratelimiters::read,
            ratelimiters::delete
        ))
        .routes(routes!(ratelimiters::acquire))
        .routes(routes!(ratelimiters::acquire_all))
        .routes(routes!(listings::list_locks))
        .routes(routes!(listings::list_fair_locks))
        .routes(routes!(listings::list_rwlocks))
        .routes(routes!(listings::list_semaphores))
        .routes(routes!(listings::list_latches))
        .routes(routes!(listings::list_rate_limiters))
        .routes(routes!(listings::list_redlocks))
        .routes(routes!(listings::list_sessions))
        .routes(routes!(whoami::whoami))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(health::metrics))
}

/// The OpenAPI document at the default configuration, as committed in
/// `openapi/openapi.json`; a server serves it with its own bounds
/// ([`with_bounds`]).
pub fn openapi() -> serde_json::Value {
    polish(routes().split_for_parts().1)
}

/// The API routes (without the layers, Swagger UI and fallbacks) and the
/// document describing them with this configuration's bounds (and without
/// the API-key requirement when no key is configured).
fn api_router(config: &Config, open: bool) -> (Router<AppState>, serde_json::Value) {
    let (router, doc) = routes().split_for_parts();
    let doc = with_bounds(polish(doc), config);
    (router, if open { without_security(doc) } else { doc })
}

/// The router behind the body limit.
type Limited = <DefaultBodyLimit as Layer<Router>>::Service;

/// What the router's future answers.
type Answered = Result<Response, Infallible>;

/// What every connection serves: the router (see [`router`]), through
/// CORS for the requests CORS is for.
///
/// A CORS request is one with an `Origin` header, which browsers send on
/// every cross-origin request, or a preflight (`OPTIONS`). Any other
/// request (curl, a backend, the benchmark, a same-origin page's `GET`)
/// skips the CORS layer, which builds a header map and a `Vary` value for
/// every request it sees (~8 900 instructions by callgrind, a quarter of a
/// `GET /healthz`). Its answer gets the same `Vary` a CORS answer has, so
/// that a cache never hands it to a browser's cross-origin request.
///
/// hyper serves a clone of this for every request: it is an `Arc`, and a
/// call clones only the service it calls (a CORS layer's clone copies its
/// lists).
#[derive(Clone)]
pub struct Service(Arc<Served>);

struct Served {
    plain: Limited,
    cors: Option<Cors<Limited>>,
}

/// The `Vary` of every answer while CORS is on: the request headers a CORS
/// answer depends on (tower-http's default list).
const CORS_VARY: HeaderValue = HeaderValue::from_static(
    "origin, access-control-request-method, access-control-request-headers",
);

fn with_cors_vary(answered: Answered) -> Answered {
    answered.map(|mut response| {
        response.headers_mut().append(header::VARY, CORS_VARY);
        response
    })
}

fn as_answered(answered: Answered) -> Answered {
    answered
}

impl<B> tower::Service<axum::http::Request<B>> for Service
where
    Limited: tower::Service<axum::http::Request<B>, Response = Response, Error = Infallible>,
    Cors<Limited>: tower::Service<axum::http::Request<B>, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<
        <Cors<Limited> as tower::Service<axum::http::Request<B>>>::Future,
        Map<<Limited as tower::Service<axum::http::Request<B>>>::Future, fn(Answered) -> Answered>,
    >;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // axum's router is always ready, so each call may take a clone of
        // it (or of the CORS layer around it) and call that at once.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: axum::http::Request<B>) -> Self::Future {
        let finish: fn(Answered) -> Answered = match &self.0.cors {
            Some(cors)
                if request.method() == Method::OPTIONS
                    || request.headers().contains_key(header::ORIGIN) =>
            {
                return Either::Left(cors.clone().call(request));
            }
            Some(_) => with_cors_vary,
            None => as_answered,
        };
        Either::Right(self.0.plain.clone().call(request).map(finish))
    }
}

/// The router with every layer: Swagger UI, the console and fallbacks, one
/// [`middleware::observe`] layer (request id, log labels, metrics, panic
/// catching, problem+json for errors), the body limit and CORS.
///
/// `observe` needs the matched route template, so it is the one layer
/// applied per route (`Router::layer`); the body limit and CORS need no
/// route and wrap the whole router once. Each `Router::layer` boxes every
/// route again, and axum clones each of those boxes for every request: with
/// four per-route layers a request cost ~18 boxed-service clones (each an
/// allocation), measured with callgrind.
pub fn router(state: AppState) -> Service {
    let (api, openapi) = api_router(&state.config, state.keys.open());
    let swagger = SwaggerUi::new("/docs")
        .external_url_unchecked("/openapi.json", openapi)
        .config(utoipa_swagger_ui::Config::default().validator_url("none"));
    let metrics = state.metrics.clone();
    let config = state.config.clone();

    let app = api
        .fallback(middleware::not_found)
        .with_state(state)
        .merge(swagger)
        .merge(console::router())
        .layer(axum::middleware::from_fn_with_state(
            metrics,
            middleware::observe,
        ));
    let app = DefaultBodyLimit::max(config.max_body_bytes).layer(app);

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
    let cors = cors.map(|cors| {
        cors.allow_methods([Method::GET, Method::POST, Method::PUT, Method::DELETE])
            .allow_headers([
                header::CONTENT_TYPE,
                header::ACCEPT,
                // API keys (the book's "API keys and namespaces"
                // (docs/src/api-keys.md)).
                header::AUTHORIZATION,
                REQUEST_ID,
                IDEMPOTENCY_KEY,
            ])
            .expose_headers(exposed)
            .layer(app.clone())
    });
    Service(Arc::new(Served { plain: app, cors }))
}
