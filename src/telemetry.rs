//! JSON logs through `tracing`, filtered by `LATCHKEY_LOG`.
//!
//! Holder ids are capabilities: nothing at info level or above logs them,
//! and a request's lines carry the route template, not the raw path.
//!
//! Every line logged while a request is served names it, as a span called
//! `request` would (`"span"` and `"spans"` with its method, route and
//! request id). But most requests log nothing, and a `tracing` span costs
//! every request its creation, its closing and an enter and exit at every
//! poll, whether or not a line is written. So a request has no span: its
//! [`RequestLabels`] sit, unformatted, in a task-local of the request's
//! task, and [`WithRequest`] writes them into a line only when one is
//! written. The lines are the same as a span's (a test compares them).

use std::fmt;
use std::future::Future;

use axum::extract::MatchedPath;
use axum::http::HeaderValue;
use serde::Serialize;
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, MakeWriter};
use tracing_subscriber::layer::Layer;
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

/// Installs the global JSON subscriber. Safe to call more than once (later
/// calls are ignored), which tests rely on.
pub fn init(filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(json_layer(std::io::stdout))
        .try_init();
}

/// The JSON layer every line goes through: the current span and the span
/// list (the request's labels first, when a request is served), with
/// targets.
fn json_layer<S, W>(writer: W) -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let lines = tracing_subscriber::fmt::format()
        .json()
        .with_current_span(true)
        .with_target(true);
    tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .fmt_fields(JsonFields::new())
        .event_format(WithRequest(lines))
        .with_writer(writer)
}

/// What names a request on the lines logged while it is served.
#[derive(Clone, Debug)]
pub struct RequestLabels {
    pub method: &'static str,
    /// The route template (`None`: no route matched).
    pub route: Option<MatchedPath>,
    pub request_id: HeaderValue,
}

tokio::task_local! {
    static REQUEST: RequestLabels;
}

impl RequestLabels {
    /// Runs `future` as this request: every line logged while it is polled
    /// names the request.
    pub async fn serve<F: Future>(self, future: F) -> F::Output {
        REQUEST.scope(self, future).await
    }

    /// Runs `f` as this request (for lines logged outside its future).
    pub fn in_scope<R>(self, f: impl FnOnce() -> R) -> R {
        REQUEST.sync_scope(self, f)
    }

    /// The labels as the JSON layer writes a span named `request` with
    /// these fields.
    fn to_json(&self) -> String {
        // The JSON layer writes a span's fields in the order of their
        // names, then the span's name.
        #[derive(Serialize)]
        struct Span<'a> {
            method: &'a str,
            request_id: &'a str,
            route: &'a str,
            name: &'static str,
        }
        let span = Span {
            method: self.method,
            request_id: self.request_id.to_str().unwrap_or(""),
            route: self.route.as_ref().map_or("unmatched", MatchedPath::as_str),
            name: "request",
        };
        serde_json::to_string(&span).expect("strings always serialize")
    }
}

/// The JSON event format, plus the request being served (if any) as the
/// outermost span of the line: its `"span"` when no span of its own is
/// current, and the first of its `"spans"`.
pub struct WithRequest<F>(F);

impl<S, N, F> FormatEvent<S, N> for WithRequest<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // As for a span: an event given no parent still names the current
        // one (the JSON layer falls back to it).
        let Ok(request) = REQUEST.try_with(RequestLabels::to_json) else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::with_capacity(256);
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        with_request(&mut line, &request);
        writer.write_str(&line)
    }
}

/// Adds the request's span to a JSON line: first in `"spans"` if the line
/// has its own spans (the list runs from the root; no field value can
/// hold the key's text unescaped), or as `"span"` and the only one of
/// `"spans"` at the end of the object (the last keys the layer writes).
fn with_request(line: &mut String, request: &str) {
    const SPANS: &str = "\"spans\":[";
    if let Some(at) = line.rfind(SPANS) {
        line.insert_str(at + SPANS.len(), &format!("{request},"));
    } else if let Some(end) = line.rfind('}') {
        line.insert_str(end, &format!(",\"span\":{request},\"spans\":[{request}]"));
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use axum::Router;
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    use super::*;

    /// Collects what a subscriber writes.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> MakeWriter<'w> for Lines {
        type Writer = Lines;
        fn make_writer(&'w self) -> Lines {
            self.clone()
        }
    }

    impl Lines {
        /// The lines written, each without its timestamp (compared as
        /// text: the order of the keys counts too).
        fn taken(&self) -> Vec<String> {
            let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
            text.lines()
                .map(|line| {
                    let value: serde_json::Value = serde_json::from_str(line).unwrap();
                    let stamp = value["timestamp"].to_string();
                    line.replacen(&stamp, "\"<time>\"", 1)
                })
                .collect()
        }
    }

    /// The route template axum matched for `path` under `template`.
    async fn matched(template: &str, path: &str) -> MatchedPath {
        let (sender, receiver) = std::sync::mpsc::channel();
        let app = Router::new().route(
            template,
            get(move |route: MatchedPath| async move { sender.send(route).unwrap() }),
        );
        let request = axum::http::Request::get(path).body(Body::empty()).unwrap();
        app.oneshot(request).await.unwrap();
        receiver.recv().unwrap()
    }

    /// One request as the service serves it now, or as a `request` span
    /// with the same fields (how lines were written before).
    type Serve<'a> = &'a dyn Fn(&RequestLabels, &mut dyn FnMut());

    /// What requests log: a line outside any request, a quiet request, lines
    /// in a request and in a span inside it, a line given no parent, an
    /// unmatched route, and a request id that JSON must escape.
    fn requests(acquire: &MatchedPath, serve: Serve<'_>) {
        tracing::info!(ready = true, "outside any request");
        let labels = |method, route: Option<&MatchedPath>, id: &'static str| RequestLabels {
            method,
            route: route.cloned(),
            request_id: HeaderValue::from_static(id),
        };
        serve(&labels("GET", Some(acquire), "quiet"), &mut || {
            tracing::debug!("filtered out")
        });
        let post = labels("POST", Some(acquire), "3f9c0f3e");
        serve(&post, &mut || {
            tracing::warn!(status = 503, "first line");
            let inner = tracing::info_span!(
                "store",
                node = ?("127.0.0.1", 6379),
                tries = 3u64,
                delta = -2i64,
                ratio = 0.5f64,
                big = 1u128 << 100,
                fresh = true,
            );
            inner.in_scope(|| tracing::error!(error = %"refused", "inner line"));
            tracing::info!(parent: None, "a line given no parent");
            tracing::info!("after the inner span");
        });
        serve(&labels("other", None, "say \"hi\" \\ back"), &mut || {
            tracing::error!(status = 404, "unmatched")
        });
    }

    #[tokio::test]
    async fn request_lines_are_the_lines_of_a_request_span() {
        let acquire = matched("/locks/{name}/acquire", "/locks/orders/acquire").await;

        let span = Lines::default();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_env_filter(EnvFilter::new("info"))
            .with_current_span(true)
            .with_target(true)
            .with_writer(span.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            requests(&acquire, &|labels, f| {
                let route = labels
                    .route
                    .as_ref()
                    .map_or("unmatched", MatchedPath::as_str);
                tracing::info_span!(
                    "request",
                    method = labels.method,
                    route,
                    request_id = labels.request_id.to_str().unwrap(),
                )
                .in_scope(f)
            })
        });

        let task_local = Lines::default();
        let subscriber = tracing_subscriber::registry()
            .with(EnvFilter::new("info"))
            .with(json_layer(task_local.clone()));
        tracing::subscriber::with_default(subscriber, || {
            requests(&acquire, &|labels, f| labels.clone().in_scope(f))
        });

        let (span, task_local) = (span.taken(), task_local.taken());
        assert_eq!(span.len(), 6, "{span:#?}");
        assert!(
            span[1].contains(r#""spans":[{"method":"POST""#),
            "{span:#?}"
        );
        assert_eq!(task_local, span);
    }

    /// A request's future names it on every line, across its polls.
    #[tokio::test]
    async fn a_request_future_is_named_across_its_polls() {
        let lines = Lines::default();
        let subscriber = tracing_subscriber::registry()
            .with(EnvFilter::new("info"))
            .with(json_layer(lines.clone()));
        let _default = tracing::subscriber::set_default(subscriber);
        let labels = RequestLabels {
            method: "GET",
            route: None,
            request_id: HeaderValue::from_static("polled"),
        };
        labels
            .serve(async {
                tracing::info!("before a yield");
                tokio::task::yield_now().await;
                tracing::info!("after a yield");
            })
            .await;
        tracing::info!("after the request");
        let lines = lines.taken();
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert!(
            lines[..2]
                .iter()
                .all(|l| l.contains(r#""request_id":"polled""#))
        );
        assert!(!lines[2].contains("span"), "{}", lines[2]);
    }
}
