//! The client tools' side of the HTTP API: one request at a time to a
//! latchkey service, and the wait loop that turns a wait of any length into
//! long-polls the service accepts (the book's "Client tools"
//! (docs/src/client-tools.md)).

use std::time::Duration;

use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use tokio::time::Instant;

/// The longest single long-poll asked for before the service has said its
/// own maximum (the service's default `max_wait_ms`).
const FIRST_PIECE_MS: u64 = 60_000;
/// How long a request may take beyond the wait it asks for before the
/// service counts as unreachable.
const ANSWER_SLACK: Duration = Duration::from_secs(15);
/// The pause before retrying a service that could not be reached.
const UNREACHABLE_RETRY: Duration = Duration::from_millis(500);

/// One answer of the service.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Value,
    retry_after_secs: Option<u64>,
}

impl Answer {
    /// The problem type's slug (`lock-held` for `/problems/lock-held`).
    pub fn slug(&self) -> &str {
        self.body["type"]
            .as_str()
            .map(|t| t.trim_start_matches("/problems/"))
            .unwrap_or("")
    }

    /// What the service says about it, for a message on stderr.
    pub fn detail(&self) -> String {
        match self.body["detail"].as_str() {
            Some(detail) => format!("{} ({detail})", self.status),
            None => self.status.to_string(),
        }
    }

    /// The owners a refusal names (`held_by`), joined for a message;
    /// `None` when the answer has no `held_by` (or an empty one).
    pub fn held_by(&self) -> Option<String> {
        let owners = self.body["held_by"].as_array()?;
        if owners.is_empty() {
            return None;
        }
        let named: Vec<String> = owners
            .iter()
            .map(|o| o.as_str().map_or("(no owner)".into(), |o| format!("{o:?}")))
            .collect();
        Some(named.join(", "))
    }

    /// When to ask again: `retry_after_ms`, else `Retry-After`, else 1 s.
    pub fn retry_after(&self) -> Duration {
        match (self.body["retry_after_ms"].as_u64(), self.retry_after_secs) {
            (Some(ms), _) => Duration::from_millis(ms),
            (None, Some(secs)) => Duration::from_secs(secs),
            (None, None) => Duration::from_secs(1),
        }
    }
}

/// What a wait makes of an answer that is not yet what it waits for.
#[derive(Debug, Clone, Copy)]
pub enum Again {
    /// Ask again at once: a long-poll ended without it, and it may come
    /// any time.
    Now,
    /// The service says it comes after this long, and not before: ask
    /// again then, or give up at once when that is after the wait.
    After(Duration),
}

/// Why a request or a wait did not get what it asked for.
#[derive(Debug)]
pub enum Failure {
    /// The wait passed without a grant (or an open latch); the last answer.
    NotYet(Answer),
    /// The service refused the request for good (bad input, not found,
    /// not held, …).
    Refused(Answer),
    /// The service could not be reached or kept failing (5xx, 429) until
    /// the time ran out.
    Unavailable(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::NotYet(answer) | Failure::Refused(answer) => f.write_str(&answer.detail()),
            Failure::Unavailable(why) => f.write_str(why),
        }
    }
}

/// A latchkey service at one base URL.
#[derive(Clone)]
pub struct Service {
    base: String,
    http: reqwest::Client,
}

impl Service {
    /// The service at `url`, sending `api_key` with every request.
    pub fn new(url: &str, api_key: Option<&str>) -> Result<Self, String> {
        let base = url.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(format!(
                "--url must start with http:// or https://, got {url:?}"
            ));
        }
        let mut headers = HeaderMap::new();
        if let Some(key) = api_key {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}"))
                .map_err(|_| "the API key must be printable ASCII".to_string())?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .map_err(|e| format!("cannot set up the HTTP client: {e}"))?;
        Ok(Service { base, http })
    }

    /// Sends one request and reads the JSON answer; `Err` when no answer
    /// came within `timeout`.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        headers: HeaderMap,
        timeout: Duration,
    ) -> Result<Answer, String> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .headers(headers)
            .header(ACCEPT, "application/json")
            .timeout(timeout);
        if let Some(body) = body {
            request = request
                .header(CONTENT_TYPE, "application/json")
                .body(body.to_string());
        }
        let response = request.send().await.map_err(|e| {
            format!(
                "cannot reach latchkey at {}: {}",
                self.base,
                error_chain(&e)
            )
        })?;
        let status = response.status();
        let retry_after_secs = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let bytes = response.bytes().await.map_err(|e| {
            format!(
                "latchkey at {} answered {status} but the body broke off: {e}",
                self.base
            )
        })?;
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Answer {
            status,
            body,
            retry_after_secs,
        })
    }

    /// Tries `attempt(wait_ms, timeout)` until the service answers with
    /// success that `pending` does not call "not yet" (saying when to ask
    /// again: [`Again`]), or until `wait` has
    /// passed (`None`: for as long as it takes). Each try long-polls for
    /// what is left of the wait and at most the service's longest
    /// long-poll, which the service states when it refuses a longer one.
    /// A 429 or 5xx is retried after the time the service names, a service
    /// that cannot be reached after a short pause, while the wait lasts.
    pub async fn wait_for<F, Fut>(
        &self,
        wait: Option<Duration>,
        pending: impl Fn(&Answer) -> Option<Again>,
        mut attempt: F,
    ) -> Result<Answer, Failure>
    where
        F: FnMut(u64, Duration) -> Fut,
        Fut: Future<Output = Result<Answer, String>>,
    {
        let deadline = wait.map(|w| Instant::now() + w);
        let mut longest_ms = FIRST_PIECE_MS;
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let piece_ms = left.map_or(longest_ms, |l| (l.as_millis() as u64).min(longest_ms));
            let outcome = attempt(piece_ms, Duration::from_millis(piece_ms) + ANSWER_SLACK).await;
            let out_of_time = deadline.is_some_and(|d| Instant::now() >= d);
            let pause = match outcome {
                Err(why) if out_of_time => return Err(Failure::Unavailable(why)),
                Err(_) => UNREACHABLE_RETRY,
                Ok(answer) => {
                    let retry = answer.status == StatusCode::TOO_MANY_REQUESTS
                        || answer.status.is_server_error();
                    if let Some(again) = pending(&answer) {
                        let pause = match again {
                            Again::Now => Duration::ZERO,
                            Again::After(pause) => pause,
                        };
                        if deadline.is_some_and(|d| Instant::now() + pause >= d) {
                            return Err(Failure::NotYet(answer));
                        }
                        pause
                    } else if answer.status.is_success() {
                        return Ok(answer);
                    } else if let Some(maximum) = longer_than_service_waits(&answer, piece_ms) {
                        longest_ms = maximum;
                        Duration::ZERO
                    } else if retry && !out_of_time {
                        answer.retry_after()
                    } else if retry {
                        return Err(Failure::Unavailable(format!(
                            "latchkey answered {}",
                            answer.detail()
                        )));
                    } else {
                        return Err(Failure::Refused(answer));
                    }
                }
            };
            let pause = match deadline {
                Some(d) => pause.min(d.saturating_duration_since(Instant::now())),
                None => pause,
            };
            tokio::time::sleep(pause).await;
        }
    }
}

/// The service's longest long-poll, when `answer` refuses a wait of
/// `asked_ms` as longer than that.
fn longer_than_service_waits(answer: &Answer, asked_ms: u64) -> Option<u64> {
    let problem = &answer.body;
    if answer.status != StatusCode::BAD_REQUEST
        || answer.slug() != "out-of-range"
        || problem["field"] != "wait_ms"
    {
        return None;
    }
    problem["maximum"].as_u64().filter(|max| *max < asked_ms)
}

/// reqwest's error and its causes, on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
