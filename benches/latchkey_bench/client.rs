//! The HTTP side of the load generator: a reqwest client (handoff and
//! parked waiters) and raw hyper connections (throughput), and the status
//! checks every request goes through.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, header};
use hyper_util::rt::TokioIo;
use reqwest::StatusCode;

/// Lease of every grant: long enough that none expires mid-run.
pub const LEASE_MS: u64 = 30_000;

/// The client. No client-wide timeout: each request sets its own (parked
/// long-polls legitimately last minutes).
pub fn build() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(300))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// Reads the whole body (so the connection goes back to the pool) and
/// checks the status; the error names the call, status and body. Returns
/// the body.
pub async fn expect_status(
    response: reqwest::Result<reqwest::Response>,
    want: StatusCode,
    what: &str,
) -> Result<String, String> {
    let response = response.map_err(|e| format!("{what}: request failed: {e}"))?;
    let status = response.status();
    let body = response
        .text()
        .await
        .map_err(|e| format!("{what}: reading the body failed: {e}"))?;
    if status != want {
        return Err(format!("{what}: expected {want}, got {status}: {body}"));
    }
    Ok(body)
}

/// Route prefix of plain locks.
pub const LOCKS: &str = "/locks";
/// Route prefix of fair locks (same bodies and operations as [`LOCKS`]).
pub const FAIR_LOCKS: &str = "/fair-locks";

/// `POST {base}{route}/{name}/acquire` as `holder`, waiting up to
/// `wait_ms`; `route` is [`LOCKS`] or [`FAIR_LOCKS`].
pub fn acquire(
    client: &reqwest::Client,
    base: &str,
    route: &str,
    name: &str,
    holder: &str,
    wait_ms: u64,
) -> reqwest::RequestBuilder {
    let body = serde_json::json!({ "holder": holder, "lease_ms": LEASE_MS, "wait_ms": wait_ms });
    client
        .post(format!("{base}{route}/{name}/acquire"))
        .json(&body)
        .timeout(Duration::from_millis(wait_ms) + Duration::from_secs(30))
}

/// `DELETE {base}{route}/{name}/holders/{holder}`, expecting 200.
pub async fn release(
    client: &reqwest::Client,
    base: &str,
    route: &str,
    name: &str,
    holder: &str,
) -> Result<(), String> {
    let response = client
        .delete(format!("{base}{route}/{name}/holders/{holder}"))
        .timeout(Duration::from_secs(30))
        .send()
        .await;
    expect_status(response, StatusCode::OK, "release")
        .await
        .map(drop)
}

/// One HTTP/1.1 keep-alive connection driven by hyper directly: the
/// cheapest client there is, for the throughput runs, where the load
/// generator's own CPU cost per request limits what can be measured.
pub struct Conn {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    host: String,
}

impl Conn {
    /// Connects to `base` (`http://host:port`).
    pub async fn open(base: &str) -> Result<Conn, String> {
        let host = base.trim_start_matches("http://").to_string();
        let stream = tokio::net::TcpStream::connect(&host)
            .await
            .map_err(|e| format!("connect {host}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("handshake {host}: {e}"))?;
        tokio::spawn(connection);
        Ok(Conn { sender, host })
    }

    /// Sends one request and reads the whole answer; the status must be
    /// `want`. Returns the body.
    pub async fn call(
        &mut self,
        method: Method,
        path: &str,
        json: Option<&Bytes>,
        want: StatusCode,
    ) -> Result<Bytes, String> {
        let (status, body) = self.send(method, path, json).await?;
        if status != want {
            let body = String::from_utf8_lossy(&body);
            return Err(format!("{path}: expected {want}, got {status}: {body}"));
        }
        Ok(body)
    }

    /// Sends one request and reads the whole answer, whatever its status
    /// (for callers that accept several, e.g. 200 or 429).
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        json: Option<&Bytes>,
    ) -> Result<(StatusCode, Bytes), String> {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, &self.host);
        if json.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let body = Full::new(json.cloned().unwrap_or_default());
        let request = request.body(body).map_err(|e| e.to_string())?;
        self.sender
            .ready()
            .await
            .map_err(|e| format!("{path}: {e}"))?;
        let response = (self.sender.send_request(request).await)
            .map_err(|e| format!("{path}: request failed: {e}"))?;
        let status = response.status();
        let body = (response.into_body().collect().await)
            .map_err(|e| format!("{path}: reading the body failed: {e}"))?
            .to_bytes();
        Ok((status, body))
    }
}
