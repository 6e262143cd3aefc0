//! Application state, the router with its layers, start-up and shutdown.
//!
//! [`Application::build`] binds the listener from the configuration (port 0
//! picks a free port, which is how tests start the real app) and connects
//! to Redis; [`Application::run`] serves until the shutdown token fires,
//! then drains for at most `shutdown_grace_ms`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue, Method, header};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::cors::{AllowOrigin, Any, CorsLayer};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa_swagger_ui::SwaggerUi;

use crate::config::{Config, CorsOrigins};
use crate::coord::locks::Locks;
use crate::http;
use crate::metrics::Metrics;
use crate::store::pubsub::Hub;
use crate::store::{Store, StoreConfig};
use crate::wait::WaitEngine;

/// What every request shares. One `Arc` inside: axum clones the state for
/// each extractor, so a clone must be a single reference-count increment.
#[derive(Clone)]
pub struct AppState(Arc<AppStateInner>);

impl std::ops::Deref for AppState {
    type Target = AppStateInner;
    fn deref(&self) -> &AppStateInner {
        &self.0
    }
}

pub struct AppStateInner {
    pub config: Arc<Config>,
    pub store: Store,
    pub engine: WaitEngine,
    pub locks: Locks,
    pub metrics: Metrics,
    /// Cancelled once on SIGTERM/Ctrl-C: waits end with 503 `shutting-down`.
    pub shutdown: CancellationToken,
}

pub struct Application {
    listener: TcpListener,
    router: Router,
    state: AppState,
    addr: SocketAddr,
}

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

impl Application {
    /// Connects to Redis, starts the pub/sub hub and binds the listener.
    /// `config.redis_urls` must be set (dev mode is resolved by [`run`]).
    pub async fn build(config: Config) -> Result<Application, String> {
        if config.redis_urls.is_empty() {
            return Err("no Redis URL configured".into());
        }
        let metrics = Metrics::new();
        let shutdown = CancellationToken::new();
        let store = Store::open(&StoreConfig::from_config(&config), metrics.clone()).await?;
        let hub = Hub::start(
            store.connector(),
            store.channel_pattern(),
            shutdown.clone(),
            metrics.clone(),
            config.redis_connect_timeout(),
        );
        let engine = WaitEngine::new(hub, config.max_waiters, shutdown.clone(), metrics.clone());
        let state = AppState(Arc::new(AppStateInner {
            config: Arc::new(config),
            locks: Locks::new(store.clone()),
            store,
            engine,
            metrics,
            shutdown,
        }));
        let listener = TcpListener::bind(state.config.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", state.config.listen))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let router = router(state.clone());
        Ok(Application {
            listener,
            router,
            state,
            addr,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Cancel it to start a graceful shutdown (what SIGTERM does).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.state.shutdown.clone()
    }

    /// Serves until the shutdown token is cancelled, then stops accepting,
    /// lets open waits end with 503 `shutting-down`, and returns within
    /// `shutdown_grace_ms` even if some connection does not finish.
    pub async fn run(self) -> std::io::Result<()> {
        let token = self.state.shutdown.clone();
        let grace = Duration::from_millis(self.state.config.shutdown_grace_ms);
        let server = axum::serve(self.listener, self.router)
            .with_graceful_shutdown(token.clone().cancelled_owned());
        let mut server = tokio::spawn(async move { server.await });
        tokio::select! {
            result = &mut server => return result.unwrap_or_else(|e| Err(std::io::Error::other(e))),
            _ = token.cancelled() => {}
        }
        tracing::info!(grace_ms = grace.as_millis() as u64, "shutting down");
        match tokio::time::timeout(grace, &mut server).await {
            Ok(result) => result.unwrap_or_else(|e| Err(std::io::Error::other(e))),
            Err(_) => {
                tracing::warn!("shutdown grace period ended with connections still open");
                server.abort();
                Ok(())
            }
        }
    }
}

/// The router with every layer: body limit, problem+json for errors,
/// metrics, tracing with request ids, CORS, Swagger UI and fallbacks.
pub fn router(state: AppState) -> Router {
    let (api, openapi) = http::api_router();
    let swagger = SwaggerUi::new("/docs")
        .external_url_unchecked("/openapi.json", openapi)
        .config(utoipa_swagger_ui::Config::default().validator_url("none"));
    let metrics = state.metrics.clone();
    let config = state.config.clone();

    let trace = TraceLayer::new_for_http().make_span_with(|request: &axum::extract::Request| {
        // Route template only: raw paths carry names and holder ids. The
        // field values are only computed when the span is enabled.
        tracing::info_span!(
            "request",
            method = %request.method(),
            route = request
                .extensions()
                .get::<axum::extract::MatchedPath>()
                .map(|p| p.as_str())
                .unwrap_or(""),
            request_id = request
                .headers()
                .get(&REQUEST_ID)
                .and_then(|v| v.to_str().ok())
                .unwrap_or(""),
        )
    });

    let mut app = api
        .fallback(http::middleware::not_found)
        .with_state(state)
        .merge(swagger)
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        // A bug must still answer (500 `internal`, detail not leaked)
        // rather than drop the connection.
        .layer(CatchPanicLayer::custom(http::middleware::panic_response))
        .layer(axum::middleware::from_fn(http::middleware::problem_json))
        .layer(axum::middleware::from_fn_with_state(
            metrics,
            http::middleware::record,
        ))
        .layer(trace)
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid));

    let exposed = [header::LOCATION, header::RETRY_AFTER, REQUEST_ID];
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
                .allow_headers([header::CONTENT_TYPE, header::ACCEPT, REQUEST_ID])
                .expose_headers(exposed),
        );
    }
    app
}

/// Process entry: starts dev-mode Redis servers when no Redis URL is
/// configured, runs the service until SIGTERM/Ctrl-C, and stops the
/// children on the way out.
pub fn run(mut config: Config) -> Result<(), String> {
    // Declared before the runtime so it is dropped after it: the Redis
    // children outlive every task that might still talk to them.
    let _dev = if config.dev_mode() {
        let dev = crate::devredis::DevRedis::start()?;
        config.redis_urls = vec![dev.main_url()];
        if config.redlock_nodes.is_empty() {
            config.redlock_nodes = dev.redlock_urls();
        }
        tracing::info!(
            main = %dev.main_url(),
            redlock = ?dev.redlock_urls(),
            "dev mode: no LATCHKEY_REDIS_URL, started private redis-server processes \
             (no persistence; they stop when latchkey exits)"
        );
        Some(dev)
    } else {
        None
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async move {
        let signals = ShutdownSignals::install()?;
        let app = Application::build(config).await?;
        tokio::spawn(signals.cancel_on_signal(app.shutdown_token()));
        tracing::info!(addr = %app.local_addr(), "latchkey listening");
        app.run().await.map_err(|e| format!("server error: {e}"))
    })?;
    runtime.shutdown_timeout(Duration::from_secs(1));
    tracing::info!("stopped");
    Ok(())
}

/// SIGTERM and SIGINT (Ctrl-C) listeners. They are registered when
/// created, so a signal that arrives before the first poll is not lost (and
/// does not fall through to the default action, which would kill the
/// process without a graceful shutdown).
struct ShutdownSignals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    fn install() -> Result<Self, String> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let term = signal(SignalKind::terminate())
                .map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
            let int = signal(SignalKind::interrupt())
                .map_err(|e| format!("cannot handle SIGINT: {e}"))?;
            Ok(ShutdownSignals { term, int })
        }
        #[cfg(not(unix))]
        Ok(ShutdownSignals {})
    }

    /// Cancels `token` on the first signal.
    async fn cancel_on_signal(mut self, token: CancellationToken) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => tracing::info!("SIGTERM received"),
            _ = self.int.recv() => tracing::info!("SIGINT received"),
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        token.cancel();
    }
}
