//! JSON logs through `tracing`, filtered by `LATCHKEY_LOG`.
//!
//! Holder ids are capabilities: nothing at info level or above logs them,
//! and request spans carry the route template, not the raw path.
//!
//! Every request has a span (method, route, request id), but most requests
//! log nothing. The JSON layer formats a span's fields into a JSON string
//! when the span is created, which cost about a twentieth of a lock
//! acquire's instructions in the service whether or not a line was ever
//! written. [`Deferred`] keeps a span's fields as they were recorded and
//! formats them, with the JSON layer's own visitor, only when an event in
//! that span is logged: the lines are the same, and a request that logs
//! nothing pays only for copying its fields.

use std::fmt;
use std::ops::Range;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::{Interest, Subscriber};
use tracing::{Event, Metadata};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::field::VisitOutput;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::FormattedFields;
use tracing_subscriber::fmt::format::{JsonFields, JsonVisitor};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

/// Installs the global JSON subscriber. Safe to call more than once (later
/// calls are ignored), which tests rely on.
pub fn init(filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(Deferred::new(json_layer(std::io::stdout)))
        .try_init();
}

/// The JSON layer every line goes through: the current span and the span
/// list, with targets.
fn json_layer<S, W>(writer: W) -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt::layer()
        .json()
        .with_current_span(true)
        .with_target(true)
        .with_writer(writer)
}

/// A field value as it was recorded, to be replayed to the JSON visitor;
/// text values are ranges of [`Recorded::text`].
enum Value {
    Str(Range<usize>),
    Debug(Range<usize>),
    I64(i64),
    U64(u64),
    I128(i128),
    U128(u128),
    F64(f64),
    Bool(bool),
}

/// A span's fields, kept unformatted until a line needs them. The text of
/// every string and `Debug` value goes into one buffer: a request's span
/// costs two allocations, not one per field.
struct Recorded {
    fields: Vec<(Field, Value)>,
    text: String,
}

impl Recorded {
    /// Room for a span's declared fields and their usual text (a method,
    /// a route template and a request id), so recording them allocates
    /// once for each.
    fn for_span(attrs: &Attributes<'_>) -> Self {
        Recorded {
            fields: Vec::with_capacity(attrs.metadata().fields().len()),
            text: String::with_capacity(96),
        }
    }

    fn push_text(&mut self, field: &Field, text: impl fmt::Display, debug: bool) {
        use std::fmt::Write as _;
        let start = self.text.len();
        // Writing to a String cannot fail.
        let _ = write!(self.text, "{text}");
        let range = start..self.text.len();
        let value = if debug {
            Value::Debug(range)
        } else {
            Value::Str(range)
        };
        self.fields.push((field.clone(), value));
    }
}

/// Shows a `Debug` value with `Display` (to write it into the buffer).
struct AsDebug<'a>(&'a dyn fmt::Debug);

impl fmt::Display for AsDebug<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.0, f)
    }
}

impl Visit for Recorded {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.push_text(field, value, false);
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.push_text(field, AsDebug(value), true);
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.fields.push((field.clone(), Value::I64(value)));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.fields.push((field.clone(), Value::U64(value)));
    }
    fn record_i128(&mut self, field: &Field, value: i128) {
        self.fields.push((field.clone(), Value::I128(value)));
    }
    fn record_u128(&mut self, field: &Field, value: u128) {
        self.fields.push((field.clone(), Value::U128(value)));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.fields.push((field.clone(), Value::F64(value)));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.fields.push((field.clone(), Value::Bool(value)));
    }
}

/// Shows an already formatted `Debug` value as it was.
struct Verbatim<'a>(&'a str);

impl fmt::Debug for Verbatim<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl Recorded {
    /// The fields as the JSON layer would have formatted them when the
    /// span was created (same visitor, same order of recording).
    fn format(&self) -> FormattedFields<JsonFields> {
        let mut fields = FormattedFields::<JsonFields>::new(String::new());
        let mut writer = fields.as_writer();
        let mut visitor = JsonVisitor::new(&mut writer);
        for (field, value) in &self.fields {
            match value {
                Value::Str(range) => visitor.record_str(field, &self.text[range.clone()]),
                Value::Debug(range) => {
                    visitor.record_debug(field, &Verbatim(&self.text[range.clone()]))
                }
                Value::I64(v) => visitor.record_i64(field, *v),
                Value::U64(v) => visitor.record_u64(field, *v),
                Value::I128(v) => visitor.record_i128(field, *v),
                Value::U128(v) => visitor.record_u128(field, *v),
                Value::F64(v) => visitor.record_f64(field, *v),
                Value::Bool(v) => visitor.record_bool(field, *v),
            }
        }
        // Writing to a String cannot fail.
        let _ = visitor.finish();
        fields
    }
}

/// Wraps the JSON layer: records span fields without formatting them, and
/// formats those of the spans an event is logged in just before the JSON
/// layer writes it. Everything else goes to the JSON layer unchanged.
pub struct Deferred<L> {
    inner: L,
}

impl<L> Deferred<L> {
    pub fn new(inner: L) -> Self {
        Deferred { inner }
    }
}

impl<S, L> Layer<S> for Deferred<L>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    L: Layer<S>,
{
    fn on_register_dispatch(&self, subscriber: &tracing::Dispatch) {
        self.inner.on_register_dispatch(subscriber);
    }

    fn on_layer(&mut self, subscriber: &mut S) {
        self.inner.on_layer(subscriber);
    }

    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        self.inner.register_callsite(metadata)
    }

    fn enabled(&self, metadata: &Metadata<'_>, ctx: Context<'_, S>) -> bool {
        self.inner.enabled(metadata, ctx)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.inner.max_level_hint()
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut recorded = Recorded::for_span(attrs);
        attrs.record(&mut recorded);
        span.extensions_mut().insert(recorded);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            let mut extensions = span.extensions_mut();
            if let Some(recorded) = extensions.get_mut::<Recorded>() {
                values.record(recorded);
                // Formatted already (a line was written in it): the JSON
                // layer adds the new values to its string itself.
                if extensions
                    .get_mut::<FormattedFields<JsonFields>>()
                    .is_none()
                {
                    return;
                }
            }
        }
        self.inner.on_record(id, values, ctx);
    }

    fn on_follows_from(&self, span: &Id, follows: &Id, ctx: Context<'_, S>) {
        self.inner.on_follows_from(span, follows, ctx);
    }

    fn event_enabled(&self, event: &Event<'_>, ctx: Context<'_, S>) -> bool {
        self.inner.event_enabled(event, ctx)
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope {
                let mut extensions = span.extensions_mut();
                if extensions
                    .get_mut::<FormattedFields<JsonFields>>()
                    .is_some()
                {
                    continue;
                }
                let formatted = extensions.get_mut::<Recorded>().map(|r| r.format());
                if let Some(formatted) = formatted {
                    extensions.insert(formatted);
                }
            }
        }
        self.inner.on_event(event, ctx);
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        self.inner.on_enter(id, ctx);
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        self.inner.on_exit(id, ctx);
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        self.inner.on_close(id, ctx);
    }

    fn on_id_change(&self, old: &Id, new: &Id, ctx: Context<'_, S>) {
        self.inner.on_id_change(old, new, ctx);
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

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

    impl<'w> tracing_subscriber::fmt::MakeWriter<'w> for Lines {
        type Writer = Lines;
        fn make_writer(&'w self) -> Lines {
            self.clone()
        }
    }

    impl Lines {
        /// The lines written, each without its timestamp (compared as
        /// text: the order of the fields counts too).
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

    /// What a request's life logs: events in its span and in a nested one,
    /// fields recorded later, fields of every kind, and a span nothing is
    /// logged in.
    fn requests() {
        let quiet = tracing::info_span!("request", method = "GET", route = "/healthz");
        quiet.in_scope(|| tracing::debug!("filtered out"));
        let span = tracing::info_span!(
            "request",
            method = "POST",
            route = "/locks/{name}/acquire",
            request_id = "3f9c0f3e",
            later = tracing::field::Empty,
        );
        span.in_scope(|| {
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
        });
        span.record("later", "recorded after a line");
        span.in_scope(|| tracing::info!("after the record"));
        let unformatted =
            tracing::info_span!("request", route = "/x", later = tracing::field::Empty);
        unformatted.record("later", 7u64);
        unformatted.in_scope(|| tracing::info!(answer = 42, "recorded before any line"));
    }

    #[test]
    fn deferred_span_fields_make_the_same_json_lines_as_the_json_layer() {
        let today = Lines::default();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_env_filter(EnvFilter::new("info"))
            .with_current_span(true)
            .with_target(true)
            .with_writer(today.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, requests);

        let deferred = Lines::default();
        let subscriber = tracing_subscriber::registry()
            .with(EnvFilter::new("info"))
            .with(Deferred::new(json_layer(deferred.clone())));
        tracing::subscriber::with_default(subscriber, requests);

        let (today, deferred) = (today.taken(), deferred.taken());
        assert_eq!(today.len(), 4, "{today:#?}");
        assert_eq!(deferred, today);
    }
}
