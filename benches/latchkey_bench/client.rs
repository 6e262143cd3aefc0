//! The HTTP side of the load generator: one reqwest client, and the
//! status check every request goes through.

use std::time::Duration;

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

/// `POST {base}/locks/{name}/acquire` as `holder`, waiting up to `wait_ms`.
pub fn acquire(
    client: &reqwest::Client,
    base: &str,
    name: &str,
    holder: &str,
    wait_ms: u64,
) -> reqwest::RequestBuilder {
    let body = serde_json::json!({ "holder": holder, "lease_ms": LEASE_MS, "wait_ms": wait_ms });
    client
        .post(format!("{base}/locks/{name}/acquire"))
        .json(&body)
        .timeout(Duration::from_millis(wait_ms) + Duration::from_secs(30))
}

/// `DELETE {base}/locks/{name}/holders/{holder}`, expecting 200.
pub async fn release(
    client: &reqwest::Client,
    base: &str,
    name: &str,
    holder: &str,
) -> Result<(), String> {
    let response = client
        .delete(format!("{base}/locks/{name}/holders/{holder}"))
        .timeout(Duration::from_secs(30))
        .send()
        .await;
    expect_status(response, StatusCode::OK, "release")
        .await
        .map(drop)
}
