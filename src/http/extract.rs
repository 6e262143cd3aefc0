//! Request extractors that answer in our problem format, and input rules
//! shared by every resource (the book's "Errors" (docs/src/errors.md)).

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::{HeaderMap, HeaderName, StatusCode, header};
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

use crate::error::{ApiError, ProblemType};
use crate::owner::{MAX_OWNER, unprintable};
use crate::state::AppState;

/// A JSON body whose fields are all optional: an omitted or empty body
/// (what Swagger UI sends) means "all defaults".
#[derive(Debug, Clone, Default)]
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Default,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_ascii_lowercase);
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(body_rejection)?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(ApiJson(T::default()));
        }
        if !content_type.as_deref().is_some_and(is_json) {
            return Err(ApiError::unsupported_media_type());
        }
        // Every body is an object: serde would also read a struct from an
        // array of its fields in order (`[null, null]`), which no client
        // means and the OpenAPI document does not allow.
        let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
        if first != Some(&b'{') {
            return Err(ApiError::invalid_body(
                "request body is not valid: expected a JSON object",
            ));
        }
        serde_json::from_slice(&bytes)
            .map(ApiJson)
            .map_err(|e| ApiError::invalid_body(format!("request body is not valid: {e}")))
    }
}

fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

fn body_rejection(rejection: BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ProblemType::BodyTooLarge,
            "the request body is larger than the configured limit (max_body_bytes)",
        )
    } else {
        ApiError::invalid_body(format!("could not read the request body: {rejection}"))
    }
}

/// Path parameters; a malformed path is an invalid name.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct ApiPath<T>(pub T);

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        ApiError::invalid_name(format!("invalid path: {}", rejection.body_text()))
    }
}

/// Query parameters in our problem format.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::invalid_body(format!("invalid query string: {}", rejection.body_text()))
    }
}

fn valid_chars(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._~:-".contains(&b))
}

/// A listing's name prefix: 0–256 bytes of the names' alphabet.
pub fn check_prefix(prefix: &str) -> Result<(), ApiError> {
    if prefix.len() <= 256 && valid_chars(prefix) {
        Ok(())
    } else {
        Err(ApiError::invalid_name(
            "a prefix is 0-256 characters of A-Z a-z 0-9 . _ ~ : - (as names are)",
        ))
    }
}

/// Object names: 1–256 bytes of `[A-Za-z0-9._~:-]`.
pub fn check_name(name: &str) -> Result<(), ApiError> {
    if (1..=256).contains(&name.len()) && valid_chars(name) {
        Ok(())
    } else {
        Err(ApiError::invalid_name(
            "names are 1-256 characters of A-Z a-z 0-9 . _ ~ : -",
        ))
    }
}

/// Ids (holder ids, session ids): 1–128 bytes of `[A-Za-z0-9._~:-]`;
/// otherwise the detail of the problem, naming `what`.
fn check_id(id: &str, what: &str) -> Result<(), String> {
    if (1..=128).contains(&id.len()) && valid_chars(id) {
        Ok(())
    } else {
        Err(format!(
            "{what} are 1-128 characters of A-Z a-z 0-9 . _ ~ : -"
        ))
    }
}

/// Holder ids: 1–128 bytes of `[A-Za-z0-9._~:-]`.
pub fn check_holder(holder: &str) -> Result<(), ApiError> {
    check_id(holder, "holder ids").map_err(ApiError::invalid_body)
}

/// A holder id in a path: same rules, but reported as a path problem.
pub fn check_holder_in_path(holder: &str) -> Result<(), ApiError> {
    check_id(holder, "holder ids").map_err(ApiError::invalid_name)
}

/// Session ids in a body: the rules of holder ids (the server makes them:
/// 32 hex digits).
pub fn check_session(id: &str) -> Result<(), ApiError> {
    check_id(id, "session ids").map_err(ApiError::invalid_body)
}

/// A session id in a path: same rules, but reported as a path problem.
pub fn check_session_in_path(id: &str) -> Result<(), ApiError> {
    check_id(id, "session ids").map_err(ApiError::invalid_name)
}

/// An owner label (`"owner"` in an acquire or `POST /sessions`): who holds,
/// in words, for people reading state reads, refusals and the console
/// (the book's "Who holds it" (docs/src/who-holds-it.md)). Not a secret
/// and no capability: every client of the namespace can read it. 1–200
/// bytes of UTF-8 without control characters; anything else fails the body
/// (400 `invalid-body`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Owner(String);

impl utoipa::PartialSchema for Owner {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(MAX_OWNER))
            // No control characters (Unicode category Cc), nor the
            // invisible ones that reorder or hide text: see [`unprintable`].
            .pattern(Some(
                r"^[^\u0000-\u001F\u007F-\u009F\u200B-\u200F\u202A-\u202E\u2060-\u2064\u2066-\u206F\uFEFF]+$",
            ))
            .description(Some(
                "Who holds, in words (not a secret: every client of the namespace can read \
                 it): 1-200 bytes of UTF-8 (so fewer than 200 characters where some take \
                 several bytes), printable: no control characters and no invisible formatting characters (zero-width, bidirectional overrides).",
            ))
            .examples(["web-7 pid 4242 POST /orders/42"])
            .into()
    }
}

impl utoipa::ToSchema for Owner {}

impl Owner {
    /// Checks the rules of an owner label; the error names them.
    pub fn new(label: String) -> Result<Self, String> {
        if !(1..=MAX_OWNER).contains(&label.len()) {
            return Err(format!(
                "owner must be 1-{MAX_OWNER} bytes of UTF-8, got {} bytes",
                label.len()
            ));
        }
        if label.chars().any(unprintable) {
            return Err(
                "owner must be printable: no control characters (newlines, tabs, ...) and no \
                 invisible formatting characters (zero-width, bidirectional overrides)"
                    .into(),
            );
        }
        Ok(Owner(label))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The label as a script argument: '' for none (see the scripts'
    /// header comments).
    pub fn arg(owner: Option<&Owner>) -> String {
        owner.map(|o| o.0.clone()).unwrap_or_default()
    }
}

impl<'de> Deserialize<'de> for Owner {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let label = String::deserialize(d)?;
        Owner::new(label).map_err(de::Error::custom)
    }
}

/// The longest rate-limit key, in bytes.
pub const MAX_LIMIT_KEY: usize = 256;

/// A rate limit's key: whose bucket of the limiter an acquire draws from
/// (a user id, an IP address; the book's "Rate limits per key"
/// (docs/src/rate-limiters.md)). 1–256 bytes of UTF-8 without control
/// characters; anything else fails the request (400 `invalid-body`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimitKey(String);

impl utoipa::PartialSchema for LimitKey {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(MAX_LIMIT_KEY))
            .pattern(Some(r"^[^\u0000-\u001F\u007F-\u009F]+$"))
            .description(Some(
                "Whose bucket of the limiter: 1-256 bytes of UTF-8 without control characters \
                 (e.g. a user id or an IP address). Each key has its own bucket with the \
                 limiter's configuration; without a key, the limiter's one shared bucket.",
            ))
            .examples(["user-42"])
            .into()
    }
}

impl utoipa::ToSchema for LimitKey {}

impl LimitKey {
    /// Checks the rules of a key; the error names them.
    pub fn new(key: String) -> Result<Self, String> {
        if !(1..=MAX_LIMIT_KEY).contains(&key.len()) {
            return Err(format!(
                "key must be 1-{MAX_LIMIT_KEY} bytes of UTF-8, got {} bytes",
                key.len()
            ));
        }
        if key.chars().any(char::is_control) {
            return Err("key must have no control characters (newlines, tabs, ...)".into());
        }
        Ok(LimitKey(key))
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl<'de> Deserialize<'de> for LimitKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        LimitKey::new(String::deserialize(d)?).map_err(de::Error::custom)
    }
}

/// A new holder id (or session id) with 128 bits of randomness, as 32 hex
/// digits.
pub fn new_holder() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS random source is available");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An integer millisecond field as sent. Negative numbers and numbers too
/// large for any range are kept (and later reported as `out-of-range`);
/// anything that is not an integer is a body error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Millis(pub i128);

impl<'de> Deserialize<'de> for Millis {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Whole("an integer number of milliseconds"))
            .map(Millis)
    }
}

/// A whole number as sent, with what was expected. JSON Schema counts
/// 1000.0 as an integer, and serde_json reads integers beyond u64 as
/// floats: any float without a fractional part is accepted (saturating;
/// ranges are checked later and reported as out-of-range).
struct Whole(&'static str);

impl Visitor<'_> for Whole {
    type Value = i128;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<i128, E> {
        Ok(v.into())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<i128, E> {
        Ok(v.into())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<i128, E> {
        if v.is_finite() && v.fract() == 0.0 {
            Ok(v as i128)
        } else {
            Err(E::custom(format!("expected {}", self.0)))
        }
    }
}

/// A whole number of things (a count, permits, a rate) as sent: kept like
/// [`Millis`], so that negative and too large numbers are reported as
/// `out-of-range`; anything else is a body error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Amount(pub i128);

impl<'de> Deserialize<'de> for Amount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Whole("a whole number")).map(Amount)
    }
}

impl Amount {
    /// Checks `min..=max` and names the field in the problem.
    pub fn within(self, field: &str, min: u64, max: u64) -> Result<u64, ApiError> {
        Millis(self.0).within(field, min, max)
    }
}

/// The longest `Idempotency-Key` accepted, in bytes.
pub const MAX_IDEMPOTENCY_KEY: usize = 255;

const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The `Idempotency-Key` header, if sent: 1 to 255 visible ASCII
/// characters.
pub fn idempotency_key(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let valid = values.next().is_none()
        && (1..=MAX_IDEMPOTENCY_KEY).contains(&value.len())
        && value.as_bytes().iter().all(|b| b.is_ascii_graphic());
    if !valid {
        return Err(ApiError::invalid_body(format!(
            "Idempotency-Key must be sent once, as 1-{MAX_IDEMPOTENCY_KEY} visible ASCII \
             characters (e.g. a UUID)"
        )));
    }
    // Visible ASCII is valid UTF-8.
    Ok(value.to_str().ok())
}

impl Millis {
    /// Checks `min..=max` and names the field in the problem.
    pub fn within(self, field: &str, min: u64, max: u64) -> Result<u64, ApiError> {
        if self.0 < i128::from(min) || self.0 > i128::from(max) {
            return Err(ApiError::out_of_range(format!(
                "{field} must be between {min} and {max}, got {}",
                self.0
            ))
            .with_field(field)
            .with_range(min, max));
        }
        Ok(self.0 as u64)
    }
}

/// True when the client asked for Server-Sent Events: its `Accept` header
/// gives `text/event-stream` a non-zero quality at least as high as JSON's
/// (`application/json`, `application/*` or `*/*`).
pub fn wants_sse(headers: &axum::http::HeaderMap) -> bool {
    let (mut sse, mut json) = (0.0f32, 0.0f32);
    let values = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok());
    for range in values.flat_map(|v| v.split(',')) {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
            .map_or(Some(1.0), |(_, v)| v.trim().parse::<f32>().ok())
            .unwrap_or(0.0);
        match media.as_str() {
            "text/event-stream" => sse = sse.max(q),
            "application/json" | "application/*" | "*/*" => json = json.max(q),
            _ => {}
        }
    }
    sse > 0.0 && sse >= json
}

/// The lease an acquire or heartbeat asked for, checked against the
/// configured range (the default when omitted).
pub fn lease_from(state: &AppState, lease: Option<Millis>) -> Result<u64, ApiError> {
    lease_named(state, "lease_ms", lease)
}

/// A session's `ttl_ms`: the range and default of a lease (its holds'
/// leases follow it).
pub fn ttl_from(state: &AppState, ttl: Option<Millis>) -> Result<u64, ApiError> {
    lease_named(state, "ttl_ms", ttl)
}

fn lease_named(state: &AppState, field: &str, lease: Option<Millis>) -> Result<u64, ApiError> {
    let c = &state.config;
    match lease {
        None => Ok(c.default_lease_ms),
        Some(m) => m.within(field, c.min_lease_ms, c.max_lease_ms),
    }
}

/// The lease a renewal asked for, checked like [`lease_from`]; `None`
/// when it names none (the hold keeps the lease it has).
pub fn renewal_lease(state: &AppState, lease: Option<Millis>) -> Result<Option<u64>, ApiError> {
    lease.map(|m| lease_from(state, Some(m))).transpose()
}

/// How long a request may wait, checked against `max_wait_ms` (0 when
/// omitted: try once).
pub fn wait_from(state: &AppState, wait: Option<Millis>) -> Result<u64, ApiError> {
    match wait {
        None => Ok(0),
        Some(m) => m.within("wait_ms", 0, state.config.max_wait_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(value: &str) -> bool {
        let mut headers = axum::http::HeaderMap::new();
        headers.insert(header::ACCEPT, value.parse().unwrap());
        wants_sse(&headers)
    }

    #[test]
    fn accept_is_parsed_with_quality_values() {
        assert!(accept("text/event-stream"));
        assert!(accept("Text/Event-Stream; charset=utf-8"));
        assert!(accept("application/json, text/event-stream"));
        assert!(accept("text/event-stream, */*;q=0.1"));
        assert!(!accept("text/event-stream;q=0"));
        assert!(!accept("text/event-stream;q=0, application/json"));
        assert!(!accept("application/json, text/event-stream;q=0.5"));
        assert!(!accept("*/*"));
        assert!(!accept("text/event-stream-ish"));
        assert!(!accept("text/event-stream;q=abc"));
    }

    #[derive(Deserialize, Debug)]
    struct Body {
        lease_ms: Option<Millis>,
    }

    fn parse(json: &str) -> Result<Option<Millis>, String> {
        serde_json::from_str::<Body>(json)
            .map(|b| b.lease_ms)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn millis_accepts_integers_and_keeps_out_of_range_values() {
        assert_eq!(parse(r#"{"lease_ms": 1000}"#).unwrap(), Some(Millis(1000)));
        assert_eq!(parse(r#"{"lease_ms": -5}"#).unwrap(), Some(Millis(-5)));
        let huge = parse(r#"{"lease_ms": 99999999999999999999999}"#)
            .unwrap()
            .unwrap();
        assert!(
            huge.0 > i128::from(u64::MAX),
            "kept as too large, not wrapped: {huge:?}"
        );
        assert_eq!(
            parse(r#"{"lease_ms": 1000.0}"#).unwrap(),
            Some(Millis(1000))
        );
        assert!(parse(r#"{"lease_ms": 1.5}"#).is_err());
        assert!(parse(r#"{"lease_ms": "1000"}"#).is_err());
    }

    #[test]
    fn names_and_holders_follow_the_contract() {
        assert!(check_name("orders").is_ok());
        assert!(check_name("a.b_c~d:e-f").is_ok());
        assert!(check_name(&"x".repeat(256)).is_ok());
        assert!(check_name(&"x".repeat(257)).is_err());
        assert!(check_name("").is_err());
        assert!(check_name("{orders}").is_err());
        assert!(check_name("a b").is_err());
        assert!(check_holder(&"h".repeat(128)).is_ok());
        assert!(check_holder(&"h".repeat(129)).is_err());
    }

    #[test]
    fn owners_are_1_to_200_bytes_without_control_characters() {
        let parse = |json: &str| serde_json::from_str::<Owner>(json).map_err(|e| e.to_string());
        assert_eq!(
            parse(r#""web-7 pid 4242""#).unwrap().as_str(),
            "web-7 pid 4242"
        );
        assert!(
            parse(&format!("\"{}\"", "é".repeat(100))).is_ok(),
            "200 bytes"
        );
        let long = parse(&format!("\"{}\"", "x".repeat(201))).unwrap_err();
        assert!(long.contains("1-200 bytes"), "{long}");
        assert!(parse(r#""""#).is_err());
        let control = parse(r#""a\nb""#).unwrap_err();
        assert!(control.contains("control characters"), "{control}");
        assert!(parse(r#""a\u0000b""#).is_err());
        assert!(parse("42").is_err());
    }

    #[test]
    fn generated_holders_are_128_bits_of_hex() {
        let a = new_holder();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, new_holder());
    }

    #[test]
    fn json_content_types() {
        assert!(is_json("application/json"));
        assert!(is_json("application/json; charset=utf-8"));
        assert!(is_json("application/merge-patch+json"));
        assert!(!is_json("application/x-www-form-urlencoded"));
        assert!(!is_json("text/plain"));
    }
}
